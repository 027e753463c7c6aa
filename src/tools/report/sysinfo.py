"""What the numbers were measured on: machine, kernel, build, tools."""
import os
import platform
import subprocess
import sys
import time


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _cpu_model():
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or None


def _run(argv):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        return p.stdout.strip() if p.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def collect(sovia, source_dir):
    git = None
    if source_dir and os.path.isdir(os.path.join(source_dir, ".git")):
        rev = _run(["git", "-C", source_dir, "rev-parse", "--short", "HEAD"])
        dirty = _run(["git", "-C", source_dir, "status", "--porcelain", "--untracked-files=no"])
        git = f"{rev}{' (modified)' if dirty else ''}" if rev else None
    try:
        import matplotlib
        mpl = matplotlib.__version__
    except Exception:
        mpl = None
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "host": platform.node(),
        "kernel": platform.release(),
        "cpu": _cpu_model(),
        "cpus_online": os.cpu_count(),
        "cpus_allowed": len(os.sched_getaffinity(0)),
        # Other load moves every number: say how busy the machine was.
        "load_average_start": round(os.getloadavg()[0], 2),
        # Cross-CPU wake-ups cost tens of microseconds when guests do not poll.
        "guest_halt_poll_ns": _read("/sys/module/haltpoll/parameters/guest_halt_poll_ns"),
        "sovia": _run([sovia, "--version"]),
        "sovia_command": sovia,
        "report_package": os.path.dirname(os.path.abspath(__file__)),
        "source_commit": git,
        "python": sys.version.split()[0],
        "matplotlib": mpl,
    }


def one_line(m):
    return (f"{m['cpu']} ({m['cpus_allowed']} CPUs), Linux {m['kernel']}, {m['sovia']}"
            f"{', commit ' + m['source_commit'] if m['source_commit'] else ''}")
