"""Flat memory over long traces: Requests built on arrival and dropped at finish,
results merged from the recorder's two time-ordered timeline streams, summaries in slices."""

from __future__ import annotations

import gc

import numpy as np
import pandas as pd
import pytest
import schedsim.metrics.summary as summary_mod
import schedsim.run.simulate as simulate_mod
from hypothesis import given, settings
from hypothesis import strategies as st
from schedsim import RunConfig, simulate
from schedsim.metrics.recorder import RESOURCES, TIMELINE_KINDS, MetricsRecorder, output_hash
from schedsim.metrics.tables import timeline_table
from schedsim.policies import Request, make_policy

GEN = "gen:process=poisson,rate=20,requests=300,prompt_mean=256,prompt_cv=1,output_mean=64,output_cv=1,seed=3"


def _count_builds(monkeypatch: pytest.MonkeyPatch) -> list:
    """Record the id of every Request an arrival builds (the run's arrivals wrapped as it wires
    them: the compiled builder itself cannot be patched)."""
    built: list = []
    real = simulate_mod.Arrivals

    def arrivals(*args: object):  # noqa: ANN202
        make = real(*args)

        def counted(k: int) -> Request:
            req = make(k)
            built.append(req.request_id)
            return req

        return counted

    monkeypatch.setattr(simulate_mod, "Arrivals", arrivals)
    return built


@pytest.mark.parametrize("policy", ["vllm-async", "vllm", "trtllm:guaranteed-no-evict", "sglang-overlap"])
def test_requests_are_built_on_arrival_and_none_is_kept_after_it_finishes(monkeypatch, policy):
    built = _count_builds(monkeypatch)
    alive_at_end: list[int] = []
    finalize = MetricsRecorder.finalize

    def check(self: MetricsRecorder) -> None:
        gc.collect()
        ids = set(built)
        alive_at_end.append(sum(isinstance(o, Request) and o.request_id in ids for o in gc.get_objects()))
        finalize(self)

    monkeypatch.setattr(MetricsRecorder, "finalize", check)
    res = simulate(RunConfig(policy=policy, trace=GEN))
    assert res.requests["finish_reason"].isin(["stop", "length"]).all()
    assert len(built) == len(res.requests)  # each arrival built once
    assert alive_at_end[0] == 0  # every finished Request was released before the tables


def test_requests_after_max_sim_time_are_never_built(monkeypatch):
    built = _count_builds(monkeypatch)
    res = simulate(RunConfig(trace=GEN, max_sim_time=3.0))
    arrived = int((res.requests["arrival_time"] <= 3.0).sum())
    assert 0 < len(built) <= arrived < len(res.requests)
    req = res.requests
    unfinished = req[req["finish_reason"].isna() & (req["num_output_tokens"] > 0)]
    assert len(unfinished) > 0  # built, running at the cut: its tokens hashed at the end
    assert (unfinished["output_hash"] != output_hash([])).all()
    never = req[req["arrival_time"] > 3.0]
    assert len(never) > 0 and (never["num_output_tokens"] == 0).all()
    assert (never["output_hash"] == output_hash([])).all() and never["first_token_time"].isna().all()


def _old_timeline(rows: list[tuple[int, int, float, float, int]]) -> pd.DataFrame:
    """The reference: every interval in append order, stably sorted by (start, resource)."""
    res, kind, start, end, step = (list(c) for c in zip(*rows, strict=True)) if rows else ([],) * 5
    df = pd.DataFrame(
        {
            "resource": pd.Categorical.from_codes(np.array(res, dtype=np.int8), list(RESOURCES)),
            "kind": pd.Categorical.from_codes(np.array(kind, dtype=np.int8), list(TIMELINE_KINDS)),
            "start": np.array(start, dtype=float),
            "end": np.array(end, dtype=float),
            "step": np.array(step, dtype=np.int32),
        }
    )
    return df.sort_values(["start", "resource"], kind="stable").reset_index(drop=True)


def _recorder() -> MetricsRecorder:
    """A recorder with no requests: only its timeline streams get rows."""
    return MetricsRecorder(make_policy("vllm"), [], clock=lambda: 0.0)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.integers(0, 3), st.integers(0, 12), st.integers(0, 50)), max_size=60
    ),
    st.booleans(),
)
def test_merged_timeline_equals_a_stable_sort_of_all_intervals(items, ordered):
    """Ties across streams, equal starts within a stream, and streams out of order (fallback)."""
    rec, rows, t_cpu, t_gpu = _recorder(), [], 0.0, 0.0
    for gpu, kind, start, step in items:
        t = start / 4
        if ordered and gpu:  # what the simulator appends: each stream in start order
            t = t_gpu = max(t_gpu, t)
        elif ordered:
            t = t_cpu = max(t_cpu, t)
        name = "forward" if gpu else TIMELINE_KINDS[kind]
        rec.add_interval("gpu" if gpu else "cpu", name, t, t + 0.5, step)
        rows.append((int(gpu), TIMELINE_KINDS.index(name), t, t + 0.5, step))
    got = timeline_table(rec)
    want = _old_timeline(rows)
    assert got.equals(want)
    assert list(got.dtypes.astype(str)) == ["category", "category", "float64", "float64", "int32"]


def _busy_reference(tl: pd.DataFrame) -> dict:
    """busy_figures computed without slices, as one merged overlap."""
    cpu, gpu = tl[tl["resource"] == "cpu"], tl[tl["resource"] == "gpu"]
    cs, ce = cpu["start"].to_numpy(), cpu["end"].to_numpy()
    gs, ge = gpu["start"].to_numpy(), gpu["end"].to_numpy()
    busy = float(np.sum(ce - cs))
    hidden = summary_mod.overlap(cs, ce, gs, ge)
    return {"cpu_busy_s": busy, "cpu_hidden_fraction": hidden / busy}


@pytest.mark.parametrize("overlapping_cpu", [False, True])
def test_busy_figures_in_slices_equal_one_pass(monkeypatch, overlapping_cpu):
    res = simulate(RunConfig(max_requests=150))
    tl = res.timeline
    if overlapping_cpu:  # two CPU intervals that overlap each other: the merged fallback
        tl = tl.copy()
        i = int(np.flatnonzero(tl["resource"].to_numpy() == "cpu")[5])
        tl.loc[i, "end"] = tl.loc[i, "end"] + 0.01
    want = _busy_reference(tl)
    for chunk in (7, 1000, 1 << 20):
        monkeypatch.setattr(summary_mod, "CHUNK", chunk)
        got: dict = {}
        summary_mod.busy_figures(tl, got)
        assert got["cpu_busy_s"] == pytest.approx(want["cpu_busy_s"], rel=1e-12)
        assert got["cpu_hidden_fraction"] == pytest.approx(want["cpu_hidden_fraction"], rel=1e-9)
    assert 0.0 < want["cpu_hidden_fraction"] < 1.0


def test_heap_settings_apply_on_linux():
    import sys

    from schedsim.run.memory import pin_mmap_threshold, release_unused

    assert pin_mmap_threshold() == sys.platform.startswith("linux")
    release_unused()  # must not raise, with or without pyarrow loaded


def test_a_run_collects_its_young_generation_rarely_and_restores_the_collector():
    import gc

    from schedsim.run.memory import YOUNG_GENERATION_THRESHOLD, frozen_setup

    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        with frozen_setup():
            assert gc.get_threshold() == (YOUNG_GENERATION_THRESHOLD, 10, 10)
            assert gc.get_freeze_count() > 0  # what existed before is out of the passes
        assert gc.get_threshold() == (700, 10, 10)
        gc.set_threshold(10 * YOUNG_GENERATION_THRESHOLD, 10, 10)  # a caller's own, larger one stays
        with frozen_setup():
            assert gc.get_threshold()[0] == 10 * YOUNG_GENERATION_THRESHOLD
        gc.set_threshold(700, 10, 10)
        with pytest.raises(RuntimeError), frozen_setup():  # restored when the run raises, too
            raise RuntimeError("run failed")
        assert gc.get_threshold() == (700, 10, 10)
    finally:
        gc.set_threshold(*before)
