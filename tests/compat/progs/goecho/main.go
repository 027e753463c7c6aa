// An echo server and client written in Go, for tests/compat/test_go.py.
// Go's runtime makes its system calls itself, not through libc: a preload
// sees none of its socket calls, so sovia must leave its connections on
// kernel TCP whatever runs on the other end.
//
//	goecho server PORT NCONN       echoes NCONN connections at once, each
//	                               until its end of stream, then exits:
//	                               "served N connections, B bytes"
//	goecho client PORT NCONN SIZE  NCONN connections at once, each writes
//	                               SIZE bytes of its own pattern while it
//	                               reads and checks the echo, then closes
//	                               its write side and expects the end:
//	                               "ok N connections, B bytes"
package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
)

func pattern(conn int, pos int64) byte {
	return byte(uint64(pos+int64(conn)*1000003) * 0x9E3779B97F4A7C15 >> 56)
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "goecho: "+format+"\n", args...)
	os.Exit(1)
}

func serve(port string, nconn int) {
	ls, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fail("listen: %v", err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var total int64
	for i := 0; i < nconn; i++ {
		c, err := ls.Accept()
		if err != nil {
			fail("accept: %v", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := io.Copy(c, c)
			if err != nil {
				fail("echo: %v", err)
			}
			c.Close()
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	fmt.Printf("served %d connections, %d bytes\n", nconn, total)
}

func client(port string, id int, size int64) {
	c, err := net.Dial("tcp", "127.0.0.1:"+port)
	if err != nil {
		fail("connect: %v", err)
	}
	tc := c.(*net.TCPConn)
	go func() {
		w := bufio.NewWriterSize(tc, 32*1024)
		for pos := int64(0); pos < size; pos++ {
			if err := w.WriteByte(pattern(id, pos)); err != nil {
				fail("connection %d: write: %v", id, err)
			}
		}
		if err := w.Flush(); err != nil {
			fail("connection %d: write: %v", id, err)
		}
		if err := tc.CloseWrite(); err != nil {
			fail("connection %d: shutdown: %v", id, err)
		}
	}()
	r := bufio.NewReaderSize(tc, 64*1024)
	for pos := int64(0); ; pos++ {
		b, err := r.ReadByte()
		if err == io.EOF {
			if pos != size {
				fail("connection %d ended after %d of %d bytes", id, pos, size)
			}
			break
		}
		if err != nil {
			fail("connection %d: read: %v", id, err)
		}
		if pos >= size || b != pattern(id, pos) {
			fail("connection %d: wrong byte at %d", id, pos)
		}
	}
	tc.Close()
}

func main() {
	args := os.Args[1:]
	if len(args) == 3 && args[0] == "server" {
		n, _ := strconv.Atoi(args[2])
		serve(args[1], n)
		return
	}
	if len(args) == 4 && args[0] == "client" {
		n, _ := strconv.Atoi(args[2])
		size, _ := strconv.ParseInt(args[3], 10, 64)
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(id int) {
				defer wg.Done()
				client(args[1], id, size)
			}(i)
		}
		wg.Wait()
		fmt.Printf("ok %d connections, %d bytes\n", n, int64(n)*size)
		return
	}
	fmt.Fprintln(os.Stderr, "usage: goecho server PORT NCONN | client PORT NCONN SIZE")
	os.Exit(2)
}
