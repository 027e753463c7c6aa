"""Entry point: `python3 DIR/report` (what `sovia report` runs) or
`python3 -m report` with DIR on the path."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SYSTEM_PYTHON = "/usr/bin/python3"


def _system_python_has_matplotlib():
    """Debian's python3-matplotlib belongs to /usr/bin/python3; another
    python3 first in PATH (pyenv, a venv) does not see it."""
    if os.environ.get("SOVIA_REPORT_REEXEC") or not os.access(SYSTEM_PYTHON, os.X_OK):
        return False
    if os.path.realpath(sys.executable) == os.path.realpath(SYSTEM_PYTHON):
        return False
    return subprocess.run([SYSTEM_PYTHON, "-c", "import matplotlib"],
                          capture_output=True).returncode == 0


if __name__ == "__main__":
    try:
        import matplotlib  # noqa: F401  (only whether it is there)
    except ImportError:
        if _system_python_has_matplotlib():
            os.environ["SOVIA_REPORT_REEXEC"] = "1"
            os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, HERE, *sys.argv[1:]])
    # Run as a directory, sys.path[0] is this package itself: import it by
    # name from its parent instead, and never from the current directory.
    if sys.path and os.path.realpath(sys.path[0]) == os.path.realpath(HERE):
        sys.path[0] = os.path.dirname(HERE)
    from report.main import main
    sys.exit(main())
