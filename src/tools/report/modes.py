"""How long and how wide each report runs: --smoke (the test's, seconds),
--quick (under 5 minutes) and the full report (under 30 minutes on a 2-core
machine). Every experiment reads its sizes and durations from here."""
from dataclasses import dataclass

KB, MB = 1024, 1024 * 1024

# seed 004 Tables 2/3: 4 B to 32 KB.
TABLE_SIZES = [4, 8, 16, 32, 64, 128, 256, 512, KB, 2 * KB, 4 * KB, 8 * KB, 16 * KB, 32 * KB]
# seed 003 Table 4's two files, and the 1 GiB of issue 5.
FTP_SMALL, FTP_BIG, FTP_GIB = 13374187, 168919040, 1 << 30


@dataclass
class Mode:
    name: str
    rounds: int              # interleaved rounds; values are medians over them
    lat_target_s: float      # time one latency run should take
    lat_sizes: list          # the Table 2/3 sizes
    fig5_sizes: list         # message-handling strategies
    bw_sizes: list           # bandwidth ablation and the Eq. 8 fit
    bw_seconds: float        # streaming time of one bandwidth run
    wait_bw_sizes: list      # wait modes: bandwidth with the CPU split
    cpu_seconds: float       # streaming time of those runs (CPU ticks need time)
    cpu_every_round: bool    # else only in the first round
    idle_seconds: float
    sweep_max: str           # `sovia bench sweep --max-size`
    sweep_every_round: bool  # else once (a busy machine leaves spikes in one sweep)
    nptcp: list              # NPtcp segments: (lower, upper, repeats)
    peer_sizes: list         # ucx / fi_pingpong latency sizes
    ftp_sizes: list
    rpc_sizes: list
    rr_pairs: list           # `sovia bench rr --pairs` (load experiment)
    rr_conns: list           # `--conns`
    rr_seconds: float        # counted seconds of each run
    rr_transports: tuple     # against kernel tcp, first
    conns_count: int         # `sovia bench conns --count` (conns experiment)
    rate_clients: list       # `sovia bench connrate --clients`
    rate_seconds: float      # counted seconds of each connrate run (and each epoll run)
    epoll_count: int         # `sovia bench epoll --count` (1 % of them active)


def _pow2(lo, hi):
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= 2
    return out


MODES = {
    "smoke": Mode("smoke", rounds=1, lat_target_s=0.01, lat_sizes=[4, KB, 32 * KB],
                  fig5_sizes=[4], bw_sizes=[KB, 64 * KB], bw_seconds=0.1,
                  wait_bw_sizes=[32 * KB], cpu_seconds=0.3, cpu_every_round=False,
                  idle_seconds=0.2, sweep_max="1K", sweep_every_round=False,
                  nptcp=[(1, KB, 50)], peer_sizes=[8],
                  ftp_sizes=[MB], rpc_sizes=[0, 64],
                  rr_pairs=[1, 2], rr_conns=[1], rr_seconds=0.2,
                  rr_transports=("tcp", "preload"),
                  conns_count=50, rate_clients=[1], rate_seconds=0.2, epoll_count=100),
    "quick": Mode("quick", rounds=3, lat_target_s=0.015,
                  lat_sizes=[4, 16, 64, 256, KB, 2 * KB, 4 * KB, 8 * KB, 32 * KB],
                  fig5_sizes=[4, 64, KB, 4 * KB],
                  bw_sizes=[4, 64, 256, KB, 4 * KB, 16 * KB, 32 * KB, 64 * KB],
                  bw_seconds=0.15, wait_bw_sizes=[4 * KB, 32 * KB], cpu_seconds=0.8,
                  cpu_every_round=False, idle_seconds=0.5, sweep_max="64K",
                  sweep_every_round=False,
                  nptcp=[(1, 64 * KB, 300)], peer_sizes=[8, KB, 32 * KB],
                  ftp_sizes=[FTP_SMALL], rpc_sizes=[0, 256, KB, 4 * KB],
                  rr_pairs=[1, 4, 16], rr_conns=[1, 16], rr_seconds=0.5,
                  rr_transports=("tcp", "preload"),
                  conns_count=1000, rate_clients=[1, 8], rate_seconds=0.5,
                  epoll_count=1000),
    "full": Mode("full", rounds=3, lat_target_s=0.15, lat_sizes=TABLE_SIZES,
                 fig5_sizes=[4, 16, 64, 256, KB, 2 * KB, 4 * KB],
                 bw_sizes=_pow2(4, 64 * KB), bw_seconds=0.5,
                 wait_bw_sizes=[KB, 4 * KB, 16 * KB, 32 * KB, 64 * KB], cpu_seconds=1.5,
                 cpu_every_round=True, idle_seconds=1.0, sweep_max="4M",
                 sweep_every_round=True,
                 nptcp=[(1, 64 * KB, 1000), (64 * KB, 8 * MB, 20)],
                 peer_sizes=[8, 64, KB, 32 * KB],
                 ftp_sizes=[FTP_SMALL, FTP_BIG, FTP_GIB],
                 rpc_sizes=[0, 64, 256, 512, KB, 2 * KB, 4 * KB],
                 rr_pairs=[1, 2, 4, 8, 16], rr_conns=[1, 16], rr_seconds=2.0,
                 rr_transports=("tcp", "preload", "sovia-adaptive"),
                 conns_count=3000, rate_clients=[1, 8], rate_seconds=2.0,
                 epoll_count=10000),
}


def size_text(n):
    """4, 1K, 32K, 4M (exact multiples only)."""
    if n >= MB and n % MB == 0:
        return f"{n // MB}M"
    if n >= KB and n % KB == 0:
        return f"{n // KB}K"
    return str(n)


def parse_size(text):
    """"64K" -> 65536 (K and M suffixes, as sovia bench takes them)."""
    mul = {"K": KB, "M": MB}.get(text[-1:].upper(), 1)
    return int(text[:-1] if mul > 1 else text) * mul
