"""CPU time of a running process split into user and kernel mode, from
/proc/PID/stat (utime, stime: all threads, in clock ticks). `sovia bench`
reports only the total CPU of a waiting receiver (`idle`), so the report
samples the driver (the sender in `bw`) and its forked peer (the receiver)
twice while they stream and divides by the wall time between the samples:
the steady state, without set-up and tear-down. Resolution: one tick
(1/CLK_TCK s) per sample window."""
import os
import time

TICK = os.sysconf("SC_CLK_TCK")


def ticks(pid):
    """(user, kernel) clock ticks of pid so far, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # After the command: state is field 3 of stat(5); utime 14, stime 15.
    return int(fields[11]), int(fields[12])


def children(pid):
    """The pids whose parent is pid."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        pass
    found = []  # kernels without CONFIG_PROC_CHILDREN: scan
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(name))
            except (OSError, IndexError, ValueError):
                pass
    return found


def wait_child(pid, timeout):
    """The first child of pid (the bench peer), waiting up to timeout s."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        kids = children(pid)
        if kids:
            return kids[0]
        time.sleep(0.005)
    return None


def sample(pids, lead, window):
    """Sleeps `lead` seconds, then measures each pid over `window` seconds.
    Returns {pid: {"user": %, "kernel": %}} (percent of one core) and the
    window actually measured; None for a pid that exited meanwhile."""
    time.sleep(lead)
    t0 = time.monotonic()
    a = {p: ticks(p) for p in pids}
    time.sleep(window)
    b = {p: ticks(p) for p in pids}
    wall = time.monotonic() - t0
    out = {}
    for p in pids:
        if a[p] is None or b[p] is None:
            out[p] = None
            continue
        out[p] = {"user": 100.0 * (b[p][0] - a[p][0]) / TICK / wall,
                  "kernel": 100.0 * (b[p][1] - a[p][1]) / TICK / wall}
    return out, wall
