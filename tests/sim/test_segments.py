"""Time-parallel replay (schedsim.run.segments): split runs give the serial run's tables, byte for byte.

Every policy that declares `idle_state()`, both engine loops, bursty random workloads (KV-starved
pools with preemptions, aborts, structured outputs, drafts), shipped traces; the tests check that
the split happened, so that equality is not the trivial kind, and that the guards (prefix safety,
equal idle states) are what keeps it exact.
"""

from __future__ import annotations

import dataclasses
import json
from unittest import mock

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schedsim import RunConfig, simulate
from schedsim.run import segments, segments_fork
from schedsim.policies import list_policies, make_policy
from test_fast_forward import _parquet
from test_sim_properties import small_config


@pytest.fixture(autouse=True)
def _wait_for_helper(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether a run splits must not depend on which process is ahead."""
    monkeypatch.setattr(segments_fork, "WAIT_FOR_HELPER", True)


SPLITTING = [i.name for i in list_policies()]  # every registered policy declares idle_state()


def bursts(sizes: list[int], gap: float = 2.0, spread: float = 0.01, prompt: int = 60,
           output: int = 12, seed: int = 0) -> pd.DataFrame:
    """Bursts of requests `gap` seconds apart: the engine drains between them (idle points)."""
    rng = np.random.default_rng(seed)
    times, t = [], 0.0
    for n in sizes:
        times += list(t + np.cumsum(rng.uniform(0.0, spread, n)))
        t = times[-1] + gap
    n = len(times)
    return pd.DataFrame({"request_id": [f"b{i}" for i in range(n)], "arrival_time": times,
                         "prompt_tokens": rng.integers(1, prompt + 1, n),
                         "output_tokens": rng.integers(1, output + 1, n),
                         "structured_output": rng.random(n) < 0.3})


def split_and_serial(cfg: RunConfig, workload: pd.DataFrame | None = None, **kw):
    """The serial and the time-parallel run of one config."""
    serial = simulate(dataclasses.replace(cfg, parallel="off", record_itl=True), workload=workload, **kw)
    split = simulate(dataclasses.replace(cfg, parallel="on", record_itl=True), workload=workload, **kw)
    return serial, split


def assert_identical(serial, split) -> None:
    """Every table byte for byte, the summary (fast-forward counters included) as JSON."""
    for name in ("requests", "steps", "timeline", "itl"):
        a, b = getattr(serial, name), getattr(split, name)
        assert list(a.dtypes) == list(b.dtypes), name
        assert a.equals(b), f"{name} differs when split"
        assert _parquet(a) == _parquet(b), name
    strip = lambda s: json.dumps({k: v for k, v in s.items() if k != "sim_wall_s"}, sort_keys=True)  # noqa: E731
    assert strip(serial.summary) == strip(split.summary)


def was_split(result) -> bool:
    """The run was spliced from two processes."""
    return isinstance(result.config["parallel_resolved"], dict)


@pytest.mark.parametrize("engine", ["sync", "async"])
@pytest.mark.parametrize("policy", SPLITTING)
def test_bursts_split_identical(policy: str, engine: str) -> None:
    cfg = small_config(policy, engine, 40, 4, 1)
    serial, split = split_and_serial(cfg, bursts([6, 5, 7, 6, 5, 6]))
    assert_identical(serial, split)
    assert was_split(split), split.config["parallel_resolved"]
    info = split.config["parallel_resolved"]
    assert info["split_position"] >= info["helper_start_position"]
    assert serial.config["parallel_resolved"] == "serial: parallel='off'"


@pytest.mark.parametrize("policy", SPLITTING)
@settings(max_examples=8, deadline=None, derandomize=True)
@given(sizes=st.lists(st.integers(2, 8), min_size=2, max_size=6), blocks=st.integers(18, 60),
       seqs=st.integers(1, 5), seed=st.integers(0, 3), work=st.floats(0.05, 0.95),
       gap=st.sampled_from([0.0, 0.05, 2.0]))
def test_random_bursts_identical(policy: str, sizes: list[int], blocks: int, seqs: int, seed: int,
                                 work: float, gap: float) -> None:
    spec = 2 if policy == "vllm" and seed % 2 else 0  # drafts and rollback on the sync engine
    cfg = small_config(policy, "auto", blocks, seqs, seed, num_spec_tokens=spec,
                       abort_times={"b1": 0.01 * seed, "b3": 2.5})
    with mock.patch.object(segments, "SPLIT_WORK", work):  # the helper starts anywhere
        serial, split = split_and_serial(cfg, bursts(sizes, gap=gap, seed=seed), check_invariants=True)
    assert_identical(serial, split)


@pytest.mark.parametrize("policy", ["vllm-async", "sglang-overlap"])
def test_kv_starved_trace_splits_with_preemptions(policy: str) -> None:
    from schedsim.traces import load_workload
    wl = load_workload("azure-conv-2023").head(240).copy()
    wl["arrival_time"] = wl["arrival_time"] + 120.0 * (np.arange(len(wl)) // 40)  # drains between
    cfg = RunConfig(policy=policy, num_gpu_blocks=300, max_model_len=4096, max_num_seqs=32)
    serial, split = split_and_serial(cfg, wl)
    assert_identical(serial, split)
    assert was_split(split)
    assert serial.summary["num_preemptions"] + serial.summary["num_pauses"] > 0


def test_a_policy_without_idle_state_runs_serially(monkeypatch: pytest.MonkeyPatch) -> None:
    from schedsim.policies.trtllm.policy import TrtllmPolicy
    monkeypatch.setattr(TrtllmPolicy, "idle_state", None)
    cfg = small_config("trtllm:max-utilization", "auto", 40, 4, 0)
    serial, split = split_and_serial(cfg, bursts([5, 5, 5]))
    assert_identical(serial, split)
    assert split.config["parallel_resolved"] == "serial: policy TrtllmPolicy declares no idle_state()"


def test_no_shared_idle_point_runs_serially(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(segments, "SPLIT_WORK", 0.9)  # the helper starts inside the last burst
    serial, split = split_and_serial(small_config("vllm", "sync", 40, 4, 0), bursts([6, 30], gap=2.0))
    assert_identical(serial, split)
    assert split.config["parallel_resolved"] == "serial: no idle point shared with the helper"


def test_helper_failure_reruns_serially(monkeypatch: pytest.MonkeyPatch) -> None:
    real = segments_fork._helper

    def failing(conn, board, plan, build, tables):
        def broken(run):
            raise RuntimeError("helper broke")
        real(conn, board, plan, build, broken)
    monkeypatch.setattr(segments_fork, "_helper", failing)
    serial, split = split_and_serial(small_config("vllm", "sync", 40, 4, 0), bursts([6, 5, 7, 6]))
    assert_identical(serial, split)
    assert "helper broke" in split.config["parallel_resolved"]


def test_auto_mode_splits_only_mid_sized_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, wl = small_config("vllm", "sync", 40, 4, 0), bursts([6, 5, 7])
    res = simulate(cfg, workload=wl)
    assert res.config["parallel_resolved"] == f"serial: fewer than {segments.MIN_ARRIVALS} arrivals"
    monkeypatch.setattr(segments, "MIN_ARRIVALS", 10)
    assert was_split(simulate(cfg, workload=wl))
    monkeypatch.setattr(segments, "MAX_ARRIVALS", 12)
    assert simulate(cfg, workload=wl).config["parallel_resolved"].startswith("serial: more than 12")
    with pytest.raises(ValueError, match="RunConfig.parallel"):
        RunConfig(parallel="yes")


def _shared_prefix_bursts() -> pd.DataFrame:
    """Three bursts; the third repeats the first's prompts (trace-given hashes): cache hits."""
    wl = bursts([4, 4, 4], prompt=200)
    wl["prompt_tokens"] = 160
    hashes = [[1000 + (i % 4), 2000 + (i % 4)] for i in range(12)]
    for i in range(4, 8):
        hashes[i] = [3000 + i, 4000 + i]  # the middle burst shares nothing
    wl["prompt_block_hashes"] = pd.Series(hashes, dtype=object)
    wl.attrs["prefix_block_size"] = 64
    return wl


def test_prefix_safe_marks_spans_of_shared_prefixes() -> None:
    class Prep:
        hashes = [(7,), None, (7, 1), None, (9,), (9,), None, None, None]

        class columns:
            prompt = [16, 16, 16, 16, 16, 16, 0, 16, 0]
    arrivals = np.arange(9)
    safe = segments.prefix_safe(Prep, arrivals, arrivals, 9)
    # prefix 7 spans (0, 2], prefix 9 (4, 5], the empty prompts (6, 8]; the rest are private
    assert safe.tolist() == [True, False, False, True, True, False, True, False, False]


def test_split_at_a_prefix_unsafe_point_would_differ(monkeypatch: pytest.MonkeyPatch) -> None:
    wl = _shared_prefix_bursts()
    cfg = RunConfig(policy="vllm", engine="sync", block_size=16, num_gpu_blocks=200,
                    max_model_len=512, latency_model="roofline")
    monkeypatch.setattr(segments, "SPLIT_WORK", 0.6)  # the helper starts in the third burst
    serial, split = split_and_serial(cfg, wl)
    assert serial.requests["num_cached_tokens"].iloc[8:].sum() > 0  # the third burst hits
    assert_identical(serial, split)  # guarded: no split before the third burst's hits
    monkeypatch.setattr(segments, "prefix_safe", lambda prep, rows, arrivals, n: np.ones(n, dtype=bool))
    unguarded = simulate(dataclasses.replace(cfg, parallel="on"), workload=wl)
    assert was_split(unguarded)
    assert unguarded.requests["num_cached_tokens"].iloc[8:].sum() == 0  # the helper's cache was cold


def test_idle_state_is_none_while_a_request_is_held() -> None:
    from schedsim.policies import Request
    policy = make_policy("vllm", num_gpu_blocks=40, block_size=16, max_model_len=256)
    fresh = policy.idle_state()
    assert fresh is not None
    policy.add_request(Request("r0", 0.0, 20, 4))
    assert policy.idle_state() is None


@settings(max_examples=100, deadline=None, derandomize=True)
@given(samples=st.lists(st.sampled_from([0.5, 1.0, 2.0]), min_size=1, max_size=30),
       own=st.lists(st.sampled_from([0.5, 1.0, 3.0]), max_size=6), data=st.data())
def test_itl_runs_splice_as_one_encoding(samples: list[float], own: list[float], data: st.DataObject) -> None:
    """The serial encoding = ours up to our mark + the helper's after its mark (its own earlier
    samples differ), whatever runs were open at either mark."""
    from schedsim.metrics.runlength import RunLengths
    from schedsim.run.segments_merge import join_runs, runs_after, runs_before
    at = data.draw(st.integers(0, len(samples)), label="split")
    overrun = data.draw(st.integers(0, len(samples) - at), label="overrun")
    counts = data.draw(st.lists(st.integers(1, 3), min_size=len(samples), max_size=len(samples)))
    serial, ours, theirs = RunLengths(), RunLengths(), RunLengths()
    for x, c in zip(samples, counts, strict=True):
        serial.append_run(x, c)
    for x, c in zip(samples[:at], counts, strict=False):
        ours.append_run(x, c)
    mark = ours.mark()
    for x, c in zip(samples[at:at + overrun], counts[at:], strict=False):  # ran past the split
        ours.append_run(x, c)
    for x in own:
        theirs.append(x)
    their_mark = theirs.mark()
    for x, c in zip(samples[at:], counts[at:], strict=True):
        theirs.append_run(x, c)
    got = join_runs(runs_before(ours.arrays(), mark), runs_after(theirs.arrays(), their_mark))
    want = serial.arrays()
    assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()


def test_arrival_during_the_last_update_is_no_split_point() -> None:
    """B arrives while the engine still updates A's last step: the serial run takes B late, a
    fresh helper would take it on time, so B is no split point (C, after a gap, is)."""
    def workload(b: float) -> pd.DataFrame:
        t = [0.0, 0.001, 0.002, b, b + 5.0, b + 5.001, b + 5.002]
        return pd.DataFrame({"request_id": [f"r{i}" for i in range(7)], "arrival_time": t,
                             "prompt_tokens": 32, "output_tokens": 8})
    cfg = small_config("vllm", "sync", 40, 4, 0)
    alone = simulate(cfg, workload=workload(100.0).head(3))
    cpu = alone.timeline[alone.timeline["resource"] == "cpu"]
    b = float(cpu["end"].max()) - 1e-5  # inside the last update_from_output phase
    serial, split = split_and_serial(cfg, workload(b))
    assert serial.requests["first_scheduled_time"].iloc[3] > b  # taken late in the serial run
    assert_identical(serial, split)
    assert split.config["parallel_resolved"]["helper_start_position"] == 3
    assert split.config["parallel_resolved"]["split_position"] == 4


def test_no_split_in_the_last_tenth(monkeypatch: pytest.MonkeyPatch) -> None:
    """The only shared idle point leaves 2 of 42 requests: shipping tables would cost more."""
    cfg, wl = small_config("vllm", "sync", 40, 4, 0), bursts([20, 20, 2], prompt=30)
    serial, split = split_and_serial(cfg, wl)
    assert_identical(serial, split)
    assert split.config["parallel_resolved"] == "serial: no idle point shared with the helper"
    monkeypatch.setattr(segments, "MIN_TAIL", 0.0)
    assert simulate(dataclasses.replace(cfg, parallel="on"), workload=wl).config[
        "parallel_resolved"]["split_position"] == 40


@pytest.mark.parametrize("case", ["shuffled rows", "rejected prompt", "max_sim_time", "kv-load failures"])
def test_split_edge_cases_identical(case: str) -> None:
    wl = bursts([6, 5, 7, 6, 5, 6], prompt=40)
    kw: dict = {}
    if case == "shuffled rows":  # workload order is not arrival order
        wl = wl.sample(frac=1.0, random_state=3).reset_index(drop=True)
    elif case == "rejected prompt":  # never arrives: its row keeps 'rejected' from either side
        wl.loc[[3, 20], "prompt_tokens"] = 400
    elif case == "max_sim_time":  # both runs stop inside the last burst
        kw["max_sim_time"] = float(wl["arrival_time"].iloc[-3]) + 0.01
    else:
        kw["kv_load_failure_fraction"] = 0.3
    cfg = small_config("vllm-async", "auto", 40, 4, 2, **kw)
    serial, split = split_and_serial(cfg, wl)
    assert_identical(serial, split)
    assert was_split(split)
    if case == "rejected prompt":
        assert (serial.requests["finish_reason"] == "rejected").sum() == 2
    if case == "max_sim_time":
        assert serial.requests["finish_reason"].isna().any()


def test_trtllm_prefix_skips_are_added_across_the_split() -> None:
    """Each burst shares one prompt prefix within itself only: splits fall between bursts, and
    the summary's prefix-skip count (outside the tables) is ours plus the helper's."""
    wl = bursts([6, 6, 6, 6], prompt=200, spread=0.0)
    wl["prompt_tokens"] = 192
    wl["prompt_block_hashes"] = pd.Series([[500 + i // 6, 900 + i // 6, 950 + i // 6]
                                           for i in range(24)], dtype=object)
    wl.attrs["prefix_block_size"] = 64
    cfg = RunConfig(policy="trtllm:guaranteed-no-evict", block_size=16, num_gpu_blocks=400,
                    max_model_len=512, latency_model="roofline", enable_prefix_caching=True,
                    policy_options={"enable_prefix_aware_scheduling": True})
    serial, split = split_and_serial(cfg, wl)
    assert_identical(serial, split)
    assert was_split(split)
    assert serial.summary["num_prefix_skips"] > 0
    skips_before = simulate(dataclasses.replace(cfg, parallel="off"), workload=wl[
        wl.index < split.config["parallel_resolved"]["split_position"]]).summary["num_prefix_skips"]
    assert 0 < skips_before < serial.summary["num_prefix_skips"]  # both sides skipped
