"""Run-length encoded samples: the inter-token gaps of a whole run in memory proportional to steps.

Every request decoding in a step sees the same gap since the previous step, so the gaps of one
run, in delivery order, form long runs of equal values. `RunLengths` keeps (value, count) pairs,
merging a new sample into the last run when equal (Python float equality; `append_run(x, n)` is
n appends, so the encoding is canonical however the samples arrive). Statistics are those
of the expanded samples: the mean, and percentiles with numpy's default 'linear' definition.
"""

from __future__ import annotations

import math

import numpy as np
from schedsim.metrics.column import Column


class RunLengths:
    """(value, count) runs of float samples in arrival order; the open (last) run is native
    fields, closed runs are typed columns (one append each when a run closes; buffers.Column, as
    an array's append converts each value through PyArg_Parse)."""

    __slots__ = ("values", "counts", "last", "last_count")

    def __init__(self) -> None:
        self.values = Column("d")
        self.counts = Column("q")
        self.last = math.nan  # value of the open run (NaN: none, and NaN never merges)
        self.last_count = 0

    def __len__(self) -> int:
        return sum(self.counts.array()) + self.last_count

    def append(self, x: float) -> None:
        """One sample (the usual case, extending the open run, without a second call)."""
        if x == self.last:
            self.last_count += 1
        else:
            self.append_run(x, 1)

    def append_run(self, x: float, count: int) -> None:
        """`count` equal samples (none: no effect, so runs are the maximal runs of equal samples)."""
        if count <= 0:
            return
        if x == self.last:
            self.last_count += count
        else:
            if self.last_count:
                self.values.append(self.last)
                self.counts.append(self.last_count)
            self.last = x
            self.last_count = count

    def mark(self) -> tuple[int, float, int]:
        """Where the samples stand now: closed runs, open run's value and count (segments)."""
        return len(self.values), self.last, self.last_count

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(values, counts) as numpy arrays, the open run included."""
        if not self.last_count:
            return np.zeros(0), np.zeros(0, dtype=np.int64)
        values = np.append(np.frombuffer(self.values.array(), dtype=float), self.last)
        return values, np.append(np.frombuffer(self.counts.array(), dtype=np.int64), self.last_count)

    def expand(self) -> np.ndarray:
        """Every sample, in order (for tests and small runs)."""
        values, counts = self.arrays()
        return np.repeat(values, counts)


def weighted_percentile(values: np.ndarray, counts: np.ndarray, q: float) -> float:
    """np.percentile(np.repeat(values, counts), q) without expanding (method 'linear')."""
    return weighted_percentiles(values, counts, [q])[0]


def weighted_percentiles(values: np.ndarray, counts: np.ndarray, qs: list[float]) -> list[float]:
    """weighted_percentile at each q, sorting the values once (any sort: equal values are
    adjacent either way, so each rank falls in the same value's run of counts)."""
    order = np.argsort(values)
    v, cum = values[order], np.cumsum(counts[order])
    n = int(cum[-1])
    out: list[float] = []
    for q in qs:
        idx = (n - 1) * (q / 100.0)
        lo = math.floor(idx)
        t = idx - lo
        a = float(v[np.searchsorted(cum, lo, side="right")])
        b = float(v[np.searchsorted(cum, min(lo + 1, n - 1), side="right")])
        diff = b - a
        out.append(b - diff * (1.0 - t) if t >= 0.5 else a + diff * t)  # numpy's _lerp
    return out


def weighted_mean(values: np.ndarray, counts: np.ndarray) -> float:
    """Mean of the expanded samples, its sum exactly rounded: the same on every machine (a BLAS
    dot product splits long vectors among threads, so its last bits follow the core count)."""
    total = math.fsum((values * counts).tolist())  # each product exactly rounded: counts < 2^53
    return total / float(counts.sum())
