"""Run-length encoded ITL samples: canonical encoding, and statistics equal to the expanded ones."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from schedsim.metrics.runlength import RunLengths, weighted_mean, weighted_percentile

samples = st.lists(st.sampled_from([0.0, 1e-3, 2.5e-3, 0.0125, 0.5, 7.0]), min_size=1, max_size=80)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(xs=samples, split=st.integers(0, 80), q=st.sampled_from([0.0, 12.5, 50.0, 99.0, 100.0]))
def test_runs_encode_like_single_appends_and_stats_match_numpy(xs: list[float], split: int, q: float) -> None:
    one, mixed = RunLengths(), RunLengths()
    for x in xs:
        one.append(x)
    for x in xs[:split]:
        mixed.append(x)
    rest = xs[split:]
    i = 0
    while i < len(rest):  # the rest as runs of equal samples, as a fast-forward jump appends them
        j = i
        while j < len(rest) and rest[j] == rest[i]:
            j += 1
        mixed.append_run(rest[i], j - i)
        i = j
    (v1, c1), (values, counts) = one.arrays(), mixed.arrays()
    assert list(v1) == list(values) and list(c1) == list(counts)
    assert np.array_equal(mixed.expand(), np.array(xs))
    assert len(mixed) == len(xs)
    assert all(a != b for a, b in zip(v1[:-1], v1[1:], strict=True))  # maximal runs
    assert weighted_percentile(values, counts, q) == float(np.percentile(xs, q))
    assert np.isclose(weighted_mean(values, counts), float(np.mean(xs)), rtol=1e-12, atol=0.0)


def test_steady_decoding_compresses_to_one_run_per_step() -> None:
    gaps = RunLengths()
    for step_gap in (0.01, 0.011, 0.011, 0.01):
        gaps.append_run(step_gap, 32)  # 32 requests decoding: one gap each
    assert list(gaps.arrays()[1]) == [32, 64, 32]


@settings(max_examples=20, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), q=st.sampled_from([0.0, 33.3, 50.0, 99.0, 100.0]))
def test_percentiles_of_many_tied_runs_match_numpy(seed: int, q: float) -> None:
    """Thousands of runs over a few values: the (unstable) sort puts ties in any order."""
    rng = np.random.default_rng(seed)
    values = rng.choice([1e-3, 2.5e-3, 0.0125, 0.5], size=5000)
    counts = rng.integers(1, 40, size=5000)
    assert weighted_percentile(values, counts, q) == float(np.percentile(np.repeat(values, counts), q))


MEAN_SCRIPT = """
import numpy as np
from schedsim.metrics.runlength import weighted_mean
rng = np.random.default_rng(7)
print(repr(weighted_mean(rng.random(200_000), rng.integers(1, 100, 200_000))))
"""


def test_mean_of_long_runs_does_not_follow_the_blas_thread_count() -> None:
    """A BLAS dot product splits a long vector among its threads, so the sum's last bits would
    follow the machine's core count: the mean is the same whatever the thread count."""
    means = set()
    for threads in ("1", "4"):
        env = {
            **os.environ,
            "OPENBLAS_NUM_THREADS": threads,
            "OMP_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
        }
        done = subprocess.run(
            [sys.executable, "-c", MEAN_SCRIPT], env=env, capture_output=True, text=True, check=True
        )
        means.add(done.stdout.strip())
    assert len(means) == 1, means
