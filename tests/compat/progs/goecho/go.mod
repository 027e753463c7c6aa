module sovia.test/goecho

go 1.19
