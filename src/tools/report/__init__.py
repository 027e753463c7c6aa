"""sovia report: the papers' experiments on this machine, with their
published figures beside ours (REPORT.md, PNG plots, results.json).

Run through `sovia report` (src/tools/sovia/cmd_report.c), which finds this
package installed (share/sovia/report) or in the source tree. One module
per experiment group (exp_*.py), each with plan(mode, ctx) -> jobs and
report(mode, store, out) -> Section; main.py runs the jobs in interleaved
rounds and writer.py writes the files."""
