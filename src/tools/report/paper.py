"""The papers' published figures, each with where it comes from (the seeds in
/work/shared/seeds: 000 Kim et al. 2003, 004 Kim et al. ICS 2001, 001 Ong &
Farrell, 003 Jang & Kim 2007). Figures that the papers only plot are given
where their text states the number; nothing here is read off a graph.

Hardware: cLAN1000 (hardware VIA, 1.25 Gb/s link) and M-VIA (software VIA
on Fast Ethernet), Pentium III / Pentium 4 PCs, Linux 2.2 / 2.4.
"""

KB = 1024

# seed 004 Table 3 (cLAN) and Table 2 (M-VIA): one-way latency in us,
# size -> (native VIA, SOVIA_REG, SOVIA_COPY, SOVIA_HYBRID).
LAT_COLUMNS = ("vi", "SOVIA_REG", "SOVIA_COPY", "SOVIA_HYBRID")
LAT_CLAN = {
    4: (8.3, 12.3, 10.5, 10.5), 8: (8.3, 12.6, 10.6, 10.7), 16: (8.4, 12.6, 10.8, 10.8),
    32: (10.1, 14.3, 12.5, 12.5), 64: (10.1, 14.5, 12.8, 12.8), 128: (10.5, 15.5, 14.0, 14.0),
    256: (11.9, 17.3, 16.0, 16.0), 512: (14.9, 20.5, 19.7, 19.7), 1 * KB: (20.2, 26.4, 26.5, 26.5),
    2 * KB: (30.4, 39.5, 40.7, 40.8), 4 * KB: (50.5, 65.3, 74.2, 65.0),
    8 * KB: (90.6, 123.4, 160.1, 123.0), 16 * KB: (169.9, 240.7, 307.7, 240.3),
    32 * KB: (329.0, 461.1, 603.2, 460.6),
}
LAT_MVIA = {
    4: (43.3, 57.6, 45.1, 45.0), 8: (43.4, 57.9, 45.4, 45.4), 16: (43.4, 58.0, 45.4, 45.4),
    32: (44.2, 58.8, 46.0, 45.9), 64: (49.1, 63.9, 51.2, 51.2), 128: (60.3, 75.5, 62.9, 62.9),
    256: (81.5, 97.5, 84.7, 84.7), 512: (123.1, 140.7, 127.7, 127.8),
    1 * KB: (206.3, 227.9, 213.5, 213.9), 2 * KB: (330.3, 354.5, 339.3, 339.6),
    4 * KB: (506.8, 539.3, 526.3, 539.4), 8 * KB: (859.0, 912.7, 915.0, 912.4),
    16 * KB: (1545.3, 1632.5, 1660.7, 1632.2), 32 * KB: (2910.2, 3053.7, 3135.6, 3053.4),
}
LAT_SRC = "seed 004 Table 3 (cLAN); Table 2 (M-VIA) in results.json"

# seed 004 §4.1 / Fig. 5 (text), 4-byte one-way latency in us.
FIG5 = {
    "clan": {"vi": 8.3, "tcp": 54.9, "SOVIA_HANDLER": 29.9, "SOVIA_SINGLE": 12.3},
    "mvia": {"vi": 43.3, "tcp": 75.6, "SOVIA_NOTIFY": 88.5, "SOVIA_HANDLER": 83.3,
             "SOVIA_SINGLE": 57.6},
}
FIG5_SRC = "seed 004 §4.1, Fig. 5 (numbers from the text)"
# seed 000 §5.2: Tsync, waking a blocked thread with a signal, and the
# HANDLER - SINGLE gap it explains.
TSYNC = {"uni_2.2": 17.0, "dual_2.2": 31.0, "uni_2.4.8": 17.4, "dual_2.4.8": 29.3,
         "handler_minus_single": 16.0}
TSYNC_SRC = "seed 000 §5.2"

# seed 004 §4.2 / Fig. 7-8 and seed 000 §5.2 / Fig. 9(b), cLAN, Mb/s.
BW = {"vi_peak": 815.0, "sovia_peak_32k": 814.0, "tcp_32k": 450.0, "mvia_sovia_peak": 96.0,
      "nagle_beats_vi_below": 256, "dacks_matches_vi_from": 16 * KB}
BW_SRC = "seed 004 §4.2 Fig. 8; seed 000 §5.2 Fig. 9(b) (numbers from the text)"

# seed 004 §4.3 (and seed 000 §5.2): blocking instead of polling, cLAN;
# Fig. 10: CPU use during the bandwidth test with blocking calls.
WAIT = {"lat_poll": 10.5, "lat_block": 19.4, "bw_poll": 814.0, "bw_block": 780.0,
        "sender_kernel_32k": 8.7, "sender_user_32k": 1.4, "receiver_kernel_max": 13.0}
WAIT_SRC = "seed 004 §4.3, Fig. 10 (numbers from the text)"

# seed 001 Table 1 (latency, us) and §5.2 (peak throughput, Mb/s), uniprocessor.
NETPIPE = {
    "clan": {"tcp_lat": 58, "vi_poll_lat": 9, "vi_block_lat": 9, "tcp_peak": 362,
             "vi_poll_peak": 788, "vi_block_peak": 788},
    "clan_dual": {"tcp_lat": 116, "vi_poll_lat": 10, "vi_block_lat": 45, "tcp_peak": 339,
                  "vi_poll_peak": 738, "vi_block_peak": 768},
    "gnic2": {"tcp_lat": 57, "vi_poll_lat": 19, "vi_block_lat": 19, "tcp_peak": 258,
              "vi_poll_peak": 510, "vi_block_peak": 510},
}
NETPIPE_SRC = "seed 001 Table 1 and §5.2 (Fig. 2-3)"

# seed 003 §4.2, Fig. 4 and Table 3 (cLAN, Pentium 4, Linux 2.4.18), us.
OVERHEAD_LAT = {"VIPL_POLL": 9.2, "VIPL": 18.8, "SOVIA_POLL": 10.5, "SOVIA": 20.0}
OVERHEAD = {"socket": 1.3, "kernel_services": 9.6, "kernel_sockets": 1.7, "tcpip": 5.5}
OVERHEAD_SRC = "seed 003 Table 3 and §4.2 (Fig. 4)"
# seed 003 Fig. 4 at 4 B, us: the text's four, and KSOVIA and LANEVI from
# Table 3's differences (SOVIA + 1.7, then + 5.5).
FIG4_4B = dict(OVERHEAD_LAT, KSOVIA=21.7, LANE=27.2)

# seed 002 (Pentium Celeron 400 MHz, DEC 21140 Fast Ethernet, Linux 2.4.20),
# 1-byte message, us: Table 1 (UDP/IP, the intervals of its Fig. 3; t4 and
# t6 + t7 are figures only), Table 2 (M-VIA, Fig. 8) and Table 3's
# categories (UDP, M-VIA).
ANATOMY_UDP = [("t1", "system call", 0.85), ("t2", "socket send processing", 0.77),
               ("t3", "UDP send processing", 0.50), ("t5", "device send processing", 0.73),
               ("t8", "NIC DMA receive", 2.24), ("t9", "interrupt start time", 2.82),
               ("t10", "NIC interrupt service routine", 4.44),
               ("t11", "do_IRQ/softirq/net_rx_action", 2.03), ("t12", "IP receive processing", 1.81),
               ("t13", "UDP receive processing (bottom)", 1.17),
               ("t14", "net_rx_action/softirq/interrupt return", 1.23),
               ("t15", "polling before getting the message", 1.10),
               ("t17", "socket receive post-processing", 0.26), ("t18", "system call return", 0.60)]
ANATOMY_MVIA = [("t1", "VipPostSend() processing", 0.06), ("t2", "fast trap", 0.33),
                ("t3", "device send processing", 1.56), ("t6", "DMA receive time", 2.24),
                ("t7", "interrupt starting time", 2.80), ("t9", "interrupt return time", 1.50),
                ("t10", "VipRecvWait() processing (polling)", 0.04)]
ANATOMY_CATEGORIES = [("user application", None, 0.10),
                      ("protocol processing (send)", 4.22, 1.56),
                      ("protocol processing (recv)", 11.54, 3.51),
                      ("OS overhead (send)", 0.85, 0.33), ("OS overhead (recv)", 6.61, 4.30),
                      ("DMA/transmit/receive", 12.80, 13.30), ("total", 36.02, 23.10)]
ANATOMY_SRC = "seed 002 Tables 1-3 (1-byte message, Celeron 400 MHz, Fast Ethernet)"

# seed 003 §4.4, Eq. 8 and 11: BW(L) = L / (alpha L + beta).
EQ8 = {"alpha_us_per_byte": 0.0094, "beta_sovia_us": 5.48, "beta_ksovia_us": 6.68}
EQ8_SRC = "seed 003 §4.4, Eq. 8 and Eq. 11"

# FTP get, RAM disk to RAM disk: (bytes, {who: (seconds, Mb/s)}).
FTP = [
    ("seed 000 Table I", 19090223, {"tcp": (0.59, 262), "sovia": (0.27, 573),
                                   "cp": (0.25, 611), "fast_ethernet": (1.63, 90)}),
    ("seed 000 Table I", 145864380, {"tcp": (4.61, 254), "sovia": (2.20, 532),
                                    "cp": (2.17, 538), "fast_ethernet": (12.7, 90)}),
    ("seed 004 Table 5", 13827767, {"tcp": (0.38, 288), "sovia": (0.15, 736),
                                   "fast_ethernet": (1.18, 88)}),
    ("seed 004 Table 5", 65257948, {"tcp": (2.00, 256), "sovia": (0.93, 552),
                                   "fast_ethernet": (5.58, 88)}),
    ("seed 003 Table 4", 13374187, {"tcp": (0.137, 744.80), "sovia": (0.134, 778.91),
                                   "cp": (0.063, 1619.63), "fast_ethernet": (1.14, 89.51)}),
    ("seed 003 Table 4", 168919040, {"tcp": (1.74, 740.60), "sovia": (1.8, 762.57),
                                    "cp": (1.255, 1026.89), "fast_ethernet": (14.4, 89.50)}),
]
FTP_NOTE = ("tcp is kernel TCP/IP over cLAN (LANE, or LANEVI in seed 003); seed 003's "
            "TCP/IP already ran over a fast LAN emulation, hence its small gap")

# seed 000 §5.4 / Fig. 10: average time of a null RPC (0-byte argument), us.
RPC = {"tcp": 149.0, "sovia": 35.0, "fast_ethernet": 200.0}
RPC_SRC = "seed 000 §5.4, Fig. 10 (numbers from the text)"


def all_figures():
    """Everything above, for results.json."""
    return {
        "latency_clan": {str(k): dict(zip(LAT_COLUMNS, v)) for k, v in LAT_CLAN.items()},
        "latency_mvia": {str(k): dict(zip(LAT_COLUMNS, v)) for k, v in LAT_MVIA.items()},
        "fig5": FIG5, "tsync": TSYNC, "bandwidth": BW, "wait_modes": WAIT,
        "netpipe": NETPIPE, "overhead_latency": OVERHEAD_LAT, "fig4_4b": FIG4_4B, "overhead": OVERHEAD,
        "eq8": EQ8,
        "ftp": [{"source": s, "size_bytes": n,
                 "rows": {k: {"seconds": v[0], "mbps": v[1]} for k, v in d.items()}}
                for s, n, d in FTP],
        "rpc_null": RPC,
        "anatomy": {"udp": ANATOMY_UDP, "mvia": ANATOMY_MVIA, "categories": ANATOMY_CATEGORIES},
        "sources": {"latency": LAT_SRC, "fig5": FIG5_SRC, "tsync": TSYNC_SRC, "bandwidth": BW_SRC,
                    "wait_modes": WAIT_SRC, "netpipe": NETPIPE_SRC, "overhead": OVERHEAD_SRC,
                    "eq8": EQ8_SRC, "rpc": RPC_SRC, "anatomy": ANATOMY_SRC, "ftp_note": FTP_NOTE},
    }
