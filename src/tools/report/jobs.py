"""Jobs (one measurement each) and the store of their results.

Every experiment plans its jobs first, so the whole report knows its length
(for the progress display) and can interleave them: round 1 runs every job
once, round 2 again, and so on, so slow drifts of a shared machine land on
all transports alike. A value is the median over rounds; a ratio is the
median of the per-round ratios, both measured in the same round.
"""
import statistics
from dataclasses import dataclass, field
from typing import Callable, Optional


@dataclass
class Job:
    key: tuple                      # identity of the result, e.g. ("lat", "vi", 4)
    label: str                      # what the progress display shows
    est: float                      # expected seconds (progress estimate, timeout)
    bench: Optional[list] = None    # `sovia bench` arguments (without --json)
    env: dict = field(default_factory=dict)   # extra environment
    cpus: Optional[str] = None      # taskset -c LIST for the whole run
    cpu_split: bool = False         # sample user/kernel CPU of driver and peer
    run: Optional[Callable] = None  # custom runner: run(job, ctx) -> dict or list
    once: bool = False              # only in the first round (sweeps, applications)


class Store:
    """key -> list of per-round results (dicts; None where a run failed)."""

    def __init__(self):
        self.rounds = {}
        self.seconds = {}  # key -> wall seconds of its runs (for tuning the modes)
        self.errors = []  # (label, message)

    def add(self, key, rnd, result, seconds=None):
        self.rounds.setdefault(key, {})[rnd] = result
        if seconds is not None:
            self.seconds.setdefault(key, []).append(round(seconds, 3))

    def error(self, label, message):
        self.errors.append((label, message))

    def results(self, key):
        """All non-failed results of a key, in round order."""
        r = self.rounds.get(key, {})
        return [r[i] for i in sorted(r) if r[i] is not None]

    def first(self, key):
        res = self.results(key)
        return res[0] if res else None

    def runs(self, key, fld):
        """The field's per-round values (rounds where the run failed are skipped)."""
        return [r[fld] for r in self.results(key) if isinstance(r, dict) and fld in r]

    def median(self, key, fld):
        v = self.runs(key, fld)
        return statistics.median(v) if v else None

    def ratio(self, key_a, fld_a, key_b, fld_b=None):
        """Median over rounds of a/b, pairing the two runs of each round."""
        fld_b = fld_b or fld_a
        ra, rb = self.rounds.get(key_a, {}), self.rounds.get(key_b, {})
        vals = []
        for i in sorted(set(ra) & set(rb)):
            a, b = ra[i], rb[i]
            if isinstance(a, dict) and isinstance(b, dict) and fld_a in a and fld_b in b \
                    and b[fld_b]:
                vals.append(a[fld_a] / b[fld_b])
        return statistics.median(vals) if vals else None

    def diffs(self, key_a, fld, key_b):
        """a - b in every round where both ran, pairing the runs of each round."""
        ra, rb = self.rounds.get(key_a, {}), self.rounds.get(key_b, {})
        return [ra[i][fld] - rb[i][fld] for i in sorted(set(ra) & set(rb))
                if isinstance(ra[i], dict) and isinstance(rb[i], dict)
                and fld in ra[i] and fld in rb[i]]

    def diff(self, key_a, fld, key_b):
        """Median over rounds of a - b, pairing the runs of each round."""
        vals = self.diffs(key_a, fld, key_b)
        return statistics.median(vals) if vals else None

    def dump(self):
        """Every result, for results.json ("raw")."""
        return [{"key": list(k), "rounds": [self.rounds[k][i] for i in sorted(self.rounds[k])],
                 "seconds": self.seconds.get(k, [])} for k in self.rounds]


def spread(vals):
    """(max - min) / |median| of per-round values; None below two rounds."""
    if len(vals) < 2:
        return None
    med = statistics.median(vals)
    return (max(vals) - min(vals)) / abs(med) if med else None


def ratio(a, b):
    return a / b if a is not None and b else None
