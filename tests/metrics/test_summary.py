"""Summary rates (recompute share, pauses per 1k steps, prefix-cache hit rate, prefix skips) and
the runs of busy intervals behind the CPU time hidden under the GPU."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import schedsim.metrics.summary as summary_mod
from hypothesis import given, settings
from hypothesis import strategies as st
from schedsim import RunConfig, simulate
from schedsim.run.result import SUMMARY_KEYS


def test_rates_follow_the_tables_under_kv_pressure():
    res = simulate(
        RunConfig(
            policy="trtllm:max-utilization",
            trace="azure-conv-2023",
            max_requests=120,
            rate=20.0,
            num_gpu_blocks=300,
            max_model_len=4096,
        )
    )
    s, steps = res.summary, res.steps
    assert set(SUMMARY_KEYS) <= set(s)
    assert s["num_pauses"] > 0
    computed = (steps["num_prefill_tokens"] + steps["num_decode_tokens"]).sum()
    assert s["recomputed_share"] == s["recomputed_tokens"] / computed > 0
    assert s["pauses_per_1k_steps"] == 1000 * s["num_pauses"] / s["num_steps"]
    assert s["num_prefix_skips"] == 0  # skipping is off by default


@pytest.mark.parametrize("policy,kind", [("vllm", "preemptions"), ("trtllm:max-utilization", "pauses")])
def test_preemptions_and_pauses_have_rates_in_the_same_units(policy: str, kind: str) -> None:
    """A vLLM preemption and a TensorRT-LLM pause are each counted per second, per 1,000 busy
    steps and per request, so a compare table puts like next to like."""
    res = simulate(
        RunConfig(policy=policy, max_requests=120, rate=20.0, num_gpu_blocks=300, max_model_len=4096)
    )
    s = res.summary
    count = s[f"num_{kind}"]
    assert count > 0
    rate = s["preemption_rate" if kind == "preemptions" else "pause_rate"]
    assert rate == count / s["duration_s"]
    assert s[f"{kind}_per_1k_steps"] == 1000 * count / s["num_steps"]
    assert s[f"{kind}_per_request"] == count / s["num_requests"]


def test_prefix_cache_hit_rate_counts_shared_prompts():
    res = simulate(RunConfig(policy="vllm", trace="mooncake-synthetic", max_requests=200))
    req = res.requests
    want = req["num_cached_tokens"].sum() / req["prompt_tokens"].sum()
    assert 0 < res.summary["prefix_cache_hit_rate"] == want
    off = simulate(
        RunConfig(policy="vllm", trace="mooncake-synthetic", max_requests=200, enable_prefix_caching=False)
    )
    assert off.summary["prefix_cache_hit_rate"] == 0


def _timeline(items: list[tuple[bool, bool, int, int]]) -> list[tuple[str, float, float]]:
    """Rows (resource, start, end) in start order: one CPU thread's intervals, disjoint, and one
    GPU stream's, disjoint; an interval that follows starts as the other resource's last ends
    (as a sync run's do), others may overlap it. Times in tenths: sums of them round."""
    rows, t = [], {"cpu": 0.0, "gpu": 0.0}
    for gpu, follow, s, w in items:
        res, other = ("gpu", "cpu") if gpu else ("cpu", "gpu")
        start = max(t[res], t[other] if follow else s * 0.1)
        t[res] = start + w * 0.1
        rows.append((res, start, t[res]))
    rows.sort(key=lambda r: r[1])  # stable: either resource may come first at a tie
    return rows


_items = st.lists(
    st.tuples(st.booleans(), st.booleans(), st.integers(0, 40), st.integers(0, 6)), min_size=1, max_size=40
)


@settings(max_examples=80, deadline=None)
@given(_items, st.sampled_from([1, 2, 3, 7, 1 << 20]))
def test_hidden_cpu_time_equals_the_pairwise_intersection(items, chunk):
    """Runs of overlapping intervals measure every (CPU, GPU) pair's overlap, in any slicing; a
    timeline whose intervals only touch hides exactly 0."""
    rows = _timeline(items)
    start = np.array([r[1] for r in rows])
    end = np.array([r[2] for r in rows])
    cpu = [(s, e) for r, s, e in rows if r == "cpu"]
    gpu = [(s, e) for r, s, e in rows if r == "gpu"]
    want = sum(max(0.0, min(e, ge) - max(s, gs)) for s, e in cpu for gs, ge in gpu)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(summary_mod, "CHUNK", chunk)
        got = summary_mod.hidden_by_runs(start, end)
    assert got == pytest.approx(want, abs=1e-12)
    if want == 0:
        assert got == 0.0


@settings(max_examples=40, deadline=None)
@given(_items)
def test_busy_figures_by_runs_equal_the_merged_overlap(items):
    """busy_figures' sweep gives summary_mod.overlap's figure (the general, merging method)."""
    rows = _timeline(items)
    tl = pd.DataFrame(
        {
            "resource": pd.Categorical([r[0] for r in rows], categories=["cpu", "gpu"]),
            "start": [r[1] for r in rows],
            "end": [r[2] for r in rows],
        }
    )
    got: dict = {}
    summary_mod.busy_figures(tl, got)
    cpu, gpu = tl[tl["resource"] == "cpu"], tl[tl["resource"] == "gpu"]
    busy = float((cpu["end"] - cpu["start"]).sum())
    assert got["cpu_busy_s"] == pytest.approx(busy, abs=1e-12)
    if busy > 0:
        hidden = summary_mod.overlap(
            cpu["start"].to_numpy(), cpu["end"].to_numpy(), gpu["start"].to_numpy(), gpu["end"].to_numpy()
        )
        assert got["cpu_hidden_fraction"] == pytest.approx(hidden / busy, abs=1e-9)


@pytest.mark.parametrize("seed", range(8))
def test_a_sync_timeline_hides_exactly_nothing(seed):
    """CPU and GPU taking turns, each starting as the other ends: every interval its own run, so
    no rounding of long sums shows up as hidden time."""
    widths = np.random.default_rng(seed).uniform(1e-4, 3e-2, size=2000)
    end = np.cumsum(widths)
    start = np.concatenate(([0.0], end[:-1]))
    assert summary_mod.hidden_by_runs(start, end) == 0.0


@pytest.mark.parametrize("case", ["overlapping_gpu", "rows_out_of_order"])
def test_busy_figures_merge_timelines_the_sweep_cannot_take(case):
    """GPU intervals overlapping each other, or rows not in start order: the merging overlap."""
    rows = [("cpu", 0.0, 1.0), ("gpu", 0.5, 2.0), ("gpu", 1.5, 3.0), ("cpu", 2.5, 4.0)]
    if case == "rows_out_of_order":
        rows = [("cpu", 0.0, 1.0), ("cpu", 2.5, 4.0), ("gpu", 0.5, 1.5), ("gpu", 1.5, 3.0)]
    tl = pd.DataFrame(
        {
            "resource": pd.Categorical([r[0] for r in rows], categories=["cpu", "gpu"]),
            "start": [r[1] for r in rows],
            "end": [r[2] for r in rows],
        }
    )
    got: dict = {}
    summary_mod.busy_figures(tl, got)
    assert got["cpu_busy_s"] == 2.5
    assert got["cpu_hidden_fraction"] == pytest.approx(1.0 / 2.5)  # 0.5-1.0 and 2.5-3.0
