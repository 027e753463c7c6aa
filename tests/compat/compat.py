"""Shared helpers of the compatibility suite (label "compat"): unmodified
real programs under `sovia run`, both ends and one end only, each checked
by its own output (checksums, exit codes) and by the exit records.

Built on tests/programs/progtest.py (free ports, private temporary
directories, processes killed by pid, stacks of a process that overstays
its timeout). What this adds:

- one stat log per side (stat-server.jsonl, stat-client.jsonl), so the
  records of a program's helper processes (sshd's children, scp's ssh,
  git's upload-pack) are told apart by side, not guessed by exe;
- `check_side`/`check_sides`: what each scenario's records must say;
- `scenarios`: a class decorator that adds one test per scenario;
- `known_broken`: a case that fails today for a reason sovia's issue
  tracker names. It is skipped (the reason printed) unless the file runs
  with --broken, which runs only those cases (CMake's
  SOVIA_COMPAT_BROKEN registers them as compat/NAME/broken);
- a program the suite needs that is missing fails the test (exit 1), not a
  skip: scripts/setup.sh installs every one (scripts/packages.txt).

    python3 test_X.py --sovia /path/to/sovia --bindir DIR [--broken] [unittest args]

--bindir is where CMake built the C programs (tests/compat in the build
tree); the Java and Go programs are compiled there at test time.
"""
import functools
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "programs"))
import progtest as pt  # noqa: E402
from progtest import BOTH, CLIENT_ONLY, SERVER_ONLY, SCENARIOS, free_port, under  # noqa: E402,F401

PROGS = os.path.join(HERE, "progs")
# Debian's python3-zmq and python3-grpcio live in the system interpreter,
# which need not be the python3 first in PATH (nor CTest's).
DEBIAN_PYTHON = "/usr/bin/python3"
RUN_BROKEN = False


def main(programs=(), modules=()):
    """Fails (exit 1) when a program or a Debian Python module is missing,
    then runs the calling module's cases through progtest."""
    global RUN_BROKEN
    if "--broken" in sys.argv:
        sys.argv.remove("--broken")
        RUN_BROKEN = True
    missing = [p for p in programs if not (os.access(p, os.X_OK) if os.path.isabs(p)
                                           else shutil.which(p))]
    for m in modules:
        if subprocess.run([DEBIAN_PYTHON, "-c", f"import {m}"], capture_output=True).returncode:
            missing.append(f"{DEBIAN_PYTHON} module {m}")
    if missing:
        print(f"FAIL: not installed: {', '.join(missing)} (scripts/setup.sh installs them: "
              "scripts/packages.txt)", file=sys.stderr)
        sys.exit(1)
    pt.main()


def known_broken(reason):
    """A case that fails today (the reason says why and where it is
    tracked): skipped, unless the file runs with --broken."""
    def wrap(fn):
        fn.known_broken = reason
        return fn
    return wrap


def _gate(fn):
    """Runs fn when it matches the mode: the working cases by default,
    only the known-broken ones with --broken."""
    reason = getattr(fn, "known_broken", None)

    @functools.wraps(fn)
    def run(self):
        if reason and not RUN_BROKEN:
            self.skipTest(f"known broken: {reason}")
        if RUN_BROKEN and not reason:
            self.skipTest("not a known-broken case")
        return fn(self)
    return run


def scenarios(broken=None):
    """Class decorator: a test per scenario (test_both_under_sovia,
    test_client_only_under_sovia, test_server_only_under_sovia), each
    calling self.run_scenario(scenario); `broken` maps a scenario to the
    reason it is known broken. Every test_ method of the class goes
    through the known-broken gate."""
    def wrap(cls):
        for scenario in SCENARIOS:
            name = f"test_{scenario.replace('-', '_')}_under_sovia"
            if hasattr(cls, name):
                continue

            def case(self, scenario=scenario):
                self.run_scenario(scenario)
            case.__name__ = name
            if broken and scenario in broken:
                known_broken(broken[scenario])(case)
            setattr(cls, name, case)
        for name in dir(cls):
            if name.startswith("test_"):
                setattr(cls, name, _gate(getattr(cls, name)))
        return cls
    return wrap


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def write_blob(path, size):
    """`size` random bytes at `path`; returns their SHA-256."""
    h = hashlib.sha256()
    with open(path, "wb") as f:
        for off in range(0, size, 1 << 20):
            chunk = os.urandom(min(1 << 20, size - off))
            h.update(chunk)
            f.write(chunk)
    return h.hexdigest()


def _fresh(target, sources):
    return os.path.exists(target) and all(
        os.path.getmtime(target) >= os.path.getmtime(s) for s in sources)


def _build(tc, target, sources, command, env=None, cwd=None, timeout=240):
    """Builds `target` (a file or directory under BINDIR) with `command`,
    which writes to the path it is given, in a temporary directory; one
    rename replaces the target, so concurrent runs see the old or the new."""
    if _fresh(target, sources):
        return target
    os.makedirs(os.path.dirname(target), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".build-", dir=os.path.dirname(target))
    try:
        out = os.path.join(tmp, os.path.basename(target))
        p = subprocess.run(command(out), capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, **(env or {})}, cwd=cwd or tmp)
        tc.assertEqual(p.returncode, 0, f"building {target} failed:\n{p.stdout}{p.stderr}")
        if os.path.isdir(target):
            shutil.rmtree(target)
        os.replace(out, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def java_classes(tc):
    """The directory of NioEcho's classes (javac, into the build tree)."""
    src = os.path.join(PROGS, "NioEcho.java")
    return _build(tc, os.path.join(pt.BINDIR, "java-classes"), [src],
                  lambda out: ["javac", "-d", out, src])


def go_tool():
    """Debian's go (scripts/packages.txt) before any other in PATH."""
    return "/usr/bin/go" if os.access("/usr/bin/go", os.X_OK) else shutil.which("go")


def go_program(tc):
    """goecho, built with the standard library only, no network."""
    src = os.path.join(PROGS, "goecho")
    sources = [os.path.join(src, n) for n in os.listdir(src)]
    env = {"GOCACHE": os.path.join(pt.BINDIR, "go-cache"), "GOFLAGS": "-mod=mod",
           "GOPROXY": "off", "GOTOOLCHAIN": "local", "GO111MODULE": "on"}
    return _build(tc, os.path.join(pt.BINDIR, "goecho"), sources,
                  lambda out: [go_tool(), "build", "-o", out, "."], env=env, cwd=src)


def uring_echo(tc):
    path = os.path.join(pt.BINDIR, "uring_echo")
    tc.assertTrue(os.access(path, os.X_OK),
                  f"{path} not built: liburing-dev missing when CMake ran "
                  "(scripts/setup.sh installs it)")
    return path


def family(pid, most=16):
    """(pid, command name, state, start time) of `pid` and its descendants:
    a daemon's children may have left its process group (sshd's call
    setsid), where killing the group does not reach them."""
    procs = {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        procs[int(name)] = (stat[stat.index("(") + 1:stat.rindex(")")], fields[0], int(fields[1]),
                            fields[19])
    found, todo = [], [pid]
    while todo and len(found) < most:
        p = todo.pop(0)
        if p in procs:
            comm, state, _, start = procs[p]
            found.append((p, comm, state, start))
            todo += sorted(q for q, (_, _, ppid, _) in procs.items() if ppid == p)
    return found


def start_time(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


class CompatCase(pt.ProgramCase):
    """A program case whose server side and client side keep their exit
    records in separate logs. A class with BLOB_SIZE gets one file of that
    many random bytes for all its cases (cls.blob, its SHA-256 cls.blob_sha)."""

    BLOB_SIZE = 0

    @classmethod
    def setUpClass(cls):
        if cls.BLOB_SIZE:
            cls.blob_dir = tempfile.mkdtemp(prefix="compat-blob-", dir="/tmp")
            cls.blob = os.path.join(cls.blob_dir, "blob")
            cls.blob_sha = write_blob(cls.blob, cls.BLOB_SIZE)

    @classmethod
    def tearDownClass(cls):
        if cls.BLOB_SIZE:
            shutil.rmtree(cls.blob_dir, ignore_errors=True)

    def setUp(self):
        super().setUp()
        self.descendants = {}  # pid: start time, of processes our processes started

    def note_descendants(self):
        """Remembers the descendants of our running processes, to kill at
        the end those that outlive them."""
        for p in self.procs:
            if p.alive():
                for pid, _, _, start in family(p.pid)[1:]:
                    self.descendants[pid] = start

    def tearDown(self):
        self.note_descendants()
        super().tearDown()
        for pid, start in self.descendants.items():
            if start_time(pid) == start:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def check_file(self, path, sha=None, size=None):
        """`path` holds the blob (or `size` bytes hashing to `sha`)."""
        sha, size = sha or self.blob_sha, size if size is not None else self.BLOB_SIZE
        got = os.path.getsize(path) if os.path.exists(path) else None
        self.assertEqual(got, size, f"{path}: {got} bytes, not {size}" + self.context())
        self.assertEqual(sha256_file(path), sha, f"{path}: bytes differ" + self.context())

    def log(self, side):
        return os.path.join(self.tmp, f"stat-{side}.jsonl")

    def start(self, name, argv, under_sovia, profile=None, env=None, side="client"):
        return super().start(name, argv, under_sovia, profile,
                             {"SOVIA_STAT_LOG": self.log(side), **(env or {})})

    def start_server(self, name, argv, under_sovia, port, profile=None, env=None, timeout=15):
        return super().start_server(name, argv, under_sovia, port, profile,
                                    {**(env or {}), "SOVIA_STAT_LOG": self.log("server")},
                                    timeout)

    def stat_text(self):
        text = []
        for side in ("server", "client"):
            try:
                with open(self.log(side)) as f:
                    text.append(f"--- {side} side:\n{f.read()}")
            except FileNotFoundError:
                text.append(f"--- {side} side: no record")
        return "\n".join(text)

    def side_records(self, side):
        recs = []
        if os.path.exists(self.log(side)):
            with open(self.log(side)) as f:
                recs = [json.loads(line) for line in f if line.strip()]
        return recs

    def check_side(self, scenario, side, connections=1, sent=1, received=1, carried=True):
        """The records of one side's processes in a scenario. Not under
        sovia: none. Both under sovia (`carried`): at least `connections`
        carried, none on kernel TCP, at least `sent`/`received` bytes over
        sovia; with carried=None, records only (the bytes went another way:
        checks_sides' balance says they add up). One end only: nothing
        carried, at least one kernel connection (with carried=None: nothing
        carried; a program whose connections bypass libc leaves no record)."""
        recs = self.side_records(side)
        runs = scenario != (CLIENT_ONLY if side == "server" else SERVER_ONLY)
        total = lambda key: sum(r[key] for r in recs)
        where = f"{side} side, {scenario}: {recs}" + self.context()
        if not runs:
            self.assertEqual(recs, [], f"records of processes not under sovia: {where}")
            return recs
        if carried is None:
            self.assertEqual(total("carried") if scenario != BOTH else 0, 0,
                             f"carried with one end only: {where}")
            return recs
        self.assertNotEqual(recs, [], f"no exit record: {where}")
        if scenario != BOTH:
            self.assertEqual(total("carried"), 0, f"carried with one end only: {where}")
            self.assertGreaterEqual(total("kernel") + total("fell_back"), 1,
                                    f"no kernel connection counted: {where}")
        else:
            self.assertGreaterEqual(total("carried"), connections, f"not carried: {where}")
            self.assertEqual(total("kernel") + total("fell_back"), 0, f"kernel TCP: {where}")
            self.assertGreaterEqual(total("bytes_sent"), sent, f"bytes sent: {where}")
            self.assertGreaterEqual(total("bytes_received"), received, f"bytes received: {where}")
        return recs

    def check_sides(self, scenario, connections=1, client_sent=1, server_sent=1, balanced=True,
                    carried=True):
        """Both sides' records; with both under sovia and `balanced`, what
        one side sent over sovia the other received (every byte was read)."""
        server = client = None
        with self.subTest(records="server", scenario=scenario):
            server = self.check_side(scenario, "server", connections, server_sent, client_sent,
                                     carried)
        with self.subTest(records="client", scenario=scenario):
            client = self.check_side(scenario, "client", connections, client_sent, server_sent,
                                     carried)
        if scenario == BOTH and balanced and server is not None and client is not None:
            with self.subTest(records="balance", scenario=scenario):
                total = lambda recs, key: sum(r[key] for r in recs)
                self.assertEqual((total(client, "bytes_sent"), total(client, "bytes_received")),
                                 (total(server, "bytes_received"), total(server, "bytes_sent")),
                                 "client's (sent, received) over sovia against the server's "
                                 "(received, sent)" + self.context())
        return server, client

    def assert_exit(self, proc, timeout, codes=(0,)):
        """proc's exit code, which must be in `codes`; after `timeout`
        seconds the test fails with the stacks of every thread of every
        process still running in the test (and their descendants), then
        kills proc."""
        try:
            proc.rc = proc.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            for p in self.procs:
                if p.alive():
                    p.stack = "\n".join(
                        f"--- pid {pid} ({comm}, state {state}):\n"
                        + (pt.stack_dump(pid) if state != "Z" else "(zombie)")
                        for pid, comm, state, _ in family(p.pid, most=8))
            proc.kill()
            proc.rc = None
            self.fail(f"{proc.name} still running after {timeout} s (killed)" + self.context())
        self.assertIn(proc.rc, codes, f"{proc.name} exit code {proc.rc}" + self.context())
        return proc.rc

    def echo_pair(self, scenario, server_argv, client_argv, nconn, size, timeout=30,
                  start_timeout=15):
        """Runs an echo server and client whose last words are "served N
        connections, B bytes" and "ok N connections, B bytes" (uring_echo,
        goecho, NioEcho) and checks both."""
        s_under, c_under = under(scenario)
        port = free_port()
        server = self.start_server("echo-server", server_argv(port), s_under, port,
                                   timeout=start_timeout)
        client = self.start("echo-client", client_argv(port), c_under)
        self.assert_exit(client, timeout)
        self.assert_exit(server, 15)
        total = nconn * size
        self.assertEqual(client.out(), f"ok {nconn} connections, {total} bytes\n", self.context())
        self.assertEqual(server.out(), f"served {nconn} connections, {total} bytes\n",
                         self.context())

    def pipe(self, scenario, server_argv, client_argv):
        """A server and a client that move the blob one way into
        self.tmp/got (both end by themselves, exit 0): the file is checked."""
        s_under, c_under = under(scenario)
        port = free_port()
        got = os.path.join(self.tmp, "got")
        server = self.start_server("server", server_argv(port, got), s_under, port)
        client = self.start("client", client_argv(port, got), c_under)
        self.assert_exit(client, 60)
        self.assert_exit(server, 30)
        self.check_file(got)

    def stop_server(self, server, sig=signal.SIGTERM, codes=(0,), timeout=15):
        """Ends a server with `sig` (its record is written on the way out)."""
        self.note_descendants()
        rc = server.stop(sig, timeout)
        self.assertIsNotNone(rc, f"{server.name} did not end on {sig!r}" + self.context())
        self.assertIn(rc, codes, f"{server.name} exit code {rc}" + self.context())
        return rc


def http_exchange(tc, scenario, program):
    """The exchange of node_http.js and asyncio_http.py (`program` is the
    command before its arguments), their client's and curl's, each over
    one keep-alive connection, checked by SHA-256 and by the records."""
    s_under, c_under = under(scenario)
    port = free_port()
    server = tc.start_server("http-server", [*program, "server", str(port), tc.blob], s_under,
                             port)
    client = tc.start("http-client", [*program, "client", str(port), tc.blob], c_under)
    tc.assert_exit(client, 30)
    sha = tc.blob_sha
    tc.assertEqual(client.out(), f"ok blob {sha} {sha}, post {sha}, hello\n", tc.context())
    got = os.path.join(tc.tmp, "curl-blob")
    url = f"http://127.0.0.1:{port}"
    curl = tc.start("curl", ["curl", "-sS", "--fail", "-o", got, f"{url}/blob", f"{url}/hello"],
                    c_under)
    tc.assert_exit(curl, 30)
    tc.check_file(got)
    tc.assertEqual(curl.out(), "hello\n", tc.context())
    tc.stop_server(server)
    tc.assertEqual(server.out(), "served 6 requests\n", tc.context())
    # the client: two files out, the post in; curl: one file out
    tc.check_sides(scenario, connections=2, client_sent=tc.BLOB_SIZE,
                   server_sent=3 * tc.BLOB_SIZE)
