"""The progress display on stderr: job count, elapsed time, an estimate of
what is left (from the jobs' own estimates, corrected by how fast the run
goes so far) and what runs now. On a terminal one line is rewritten; in a
log, one line per job."""
import sys
import time


def clock(s):
    s = int(max(0, s))
    return f"{s // 60}:{s % 60:02d}"


class Progress:
    def __init__(self, jobs_est, stream=sys.stderr, quiet=False):
        self.total = len(jobs_est)
        self.left_est = sum(jobs_est)
        self.done_est = 0.0
        self.done = 0
        self.t0 = time.monotonic()
        self.stream = stream
        self.tty = stream.isatty()
        self.quiet = quiet

    def start(self, label, est):
        self.done += 1
        if self.quiet:
            return
        elapsed = time.monotonic() - self.t0
        # Scale the remaining estimate by how the estimates fared so far.
        speed = elapsed / self.done_est if self.done_est > 1 else 1.0
        left = self.left_est * max(speed, 0.5)
        line = (f"[{self.done:4d}/{self.total}] {clock(elapsed)} elapsed, "
                f"~{clock(left)} left  {label}")
        if self.tty:
            self.stream.write("\r\033[K" + line[:150])
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
        self.left_est -= est
        self.done_est += est

    def message(self, text):
        if self.quiet:
            return
        if self.tty:
            self.stream.write("\r\033[K")
        self.stream.write(text + "\n")
        self.stream.flush()

    def finish(self):
        self.message(f"done in {clock(time.monotonic() - self.t0)}")
