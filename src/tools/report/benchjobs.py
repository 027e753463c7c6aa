"""`sovia bench` jobs as the experiments use them. A job's key names what it
measures (mode, transport, config, size, variant), so experiments that
need the same number share one measurement: the report runs each key once
per round and their ratios come from the same runs.

Iteration counts come from a rough per-transport cost model, so each
latency run takes about the mode's lat_target_s on any transport."""
from .jobs import Job
from .modes import parse_size, size_text

# Rough one-way microseconds (fixed, per byte): they only size the runs.
_COST = {
    "limit": (0.15, 0.0), "limit-shared": (0.08, 0.0), "vi": (0.25, 0.00015),
    "vi-copy": (0.3, 0.0002), "vi-block": (0.3, 0.00015), "vi-notify": (45, 0.0002),
    "sovia": (0.3, 0.00016),
    "sovia-adaptive": (0.4, 0.00016), "sovia-block": (8, 0.0002), "tcp": (10, 0.0003),
    "tcp-poll": (3, 0.0003), "uds": (6, 0.0003), "ksovia": (6, 0.0003),
    "preload": (0.5, 0.0002),
    "ucx": (0.5, 0.0002),
}
# Pure blocking (no spin before sleeping): a wake-up costs tens of us.
NO_SPIN = {"SOVIA_VIPL_SPIN_US": "0"}
SLOW_CONFIGS = {"SOVIA_HANDLER", "SOVIA_NOTIFY"}
PROCESS_START_S = 0.03  # fork, connect, tear down
UCX_START_S = 0.4       # ucx_perftest server and client start-up


def one_way_us(transport, size, config=None, env=None):
    fixed, per_byte = _COST.get(transport, (10, 0.0003))
    if config in SLOW_CONFIGS:
        fixed = max(fixed, 40)
    if env and env.get("SOVIA_VIPL_SPIN_US") == "0":
        fixed = max(fixed, 40)
    return fixed + per_byte * size


def _tag(config, variant):
    return (config or "default", variant or "")


def lat(mode, transport, size, config=None, env=None, cpus=None, variant="", once=False):
    """One-way latency (bench lat): result field one_way_p50_us."""
    us = one_way_us(transport, size, config, env)
    iters = int(min(100000, max(200, mode.lat_target_s / (2 * us * 1e-6))))
    args = ["lat", "--transport", transport, "--size", str(size), "--iters", str(iters)]
    if config:
        args += ["--config", config]
    est = iters * 2 * us * 1e-6 * 1.1 + (UCX_START_S if transport == "ucx" else PROCESS_START_S)
    label = f"lat {transport} {config or ''} {variant} {size_text(size)}".replace("  ", " ")
    return Job(key=("lat", transport, *_tag(config, variant), size), label=label, est=est,
               bench=args, env=dict(env or {}), cpus=cpus, once=once)


def bw(mode, transport, size, config=None, env=None, seconds=None, cpu_split=False,
       variant="", once=False):
    """Streaming bandwidth (bench bw): result field gbps (and cpu if split)."""
    seconds = seconds or mode.bw_seconds
    args = ["bw", "--transport", transport, "--size", str(size), "--seconds", f"{seconds:g}"]
    if config:
        args += ["--config", config]
    est = seconds + 0.1 + (UCX_START_S if transport == "ucx" else PROCESS_START_S)
    label = f"bw {transport} {config or ''} {variant} {size_text(size)}".replace("  ", " ")
    return Job(key=("bw", transport, *_tag(config, variant), size), label=label, est=est,
               bench=args, env=dict(env or {}), cpu_split=cpu_split, once=once)


def idle(mode, transport, config=None):
    """CPU of a receiver waiting on a silent peer: field cpu_percent."""
    args = ["idle", "--transport", transport, "--seconds", f"{mode.idle_seconds:g}"]
    if config:
        args += ["--config", config]
    return Job(key=("idle", transport, *_tag(config, "")), label=f"idle {transport}",
               est=mode.idle_seconds + 0.1, bench=args)


def sweep(mode, transport, env=None, variant="", extra=()):
    """NetPIPE-style sweep (bench sweep): result {"rows": [...]}. `extra`:
    more `bench sweep` arguments (a ring's), named by `variant`."""
    args = ["sweep", "--transport", transport, "--max-size", mode.sweep_max, *extra]
    # ~0.075 s per size, three sizes per power of two; big sizes take longer.
    top = parse_size(mode.sweep_max)
    est = 3 * top.bit_length() * 0.09 + top / (1 << 20) * 0.5 + 0.5
    return Job(key=("sweep", transport, "default", variant), label=f"sweep {transport} {variant}",
               est=est, bench=args, env=dict(env or {}), once=not mode.sweep_every_round)


def key_lat(transport, size, config=None, variant=""):
    return ("lat", transport, *_tag(config, variant), size)


def key_bw(transport, size, config=None, variant=""):
    return ("bw", transport, *_tag(config, variant), size)


def key_idle(transport, config=None):
    return ("idle", transport, *_tag(config, ""))


def key_sweep(transport, variant=""):
    return ("sweep", transport, "default", variant)


def col_key(kind, col, size):
    """The key of a table column at a size: a papers' label (SOVIA_*) is the
    sovia transport with that label, anything else a transport."""
    if col.startswith("SOVIA_"):
        return (kind, "sovia", col, "", size)
    return (kind, col, "default", "", size)


def medians(store, kind, cols, sizes, fld):
    """{column: {size: median}} of a table."""
    return {c: {s: store.median(col_key(kind, c, s), fld) for s in sizes} for c in cols}
