"""Exact fast-forward: every output table is byte-identical with it on and off.

For every registered policy and both engine loops, on the shipped traces, on KV-starved pools
(preemptions, pauses, retractions) and on random hypothesis workloads. Where the policy supports
jumps (`vllm` sync, `vllm-async` with its batch queue) the tests also check that jumps happened,
so that equality is not the trivial kind.
"""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schedsim import RunConfig, simulate
from support.fastforward import (
    JUMPING,
    POLICIES,
    STATIC,
    VLLM_JUMPING,
    assert_same,
    assert_same_state_when_stopped,
    trace_config,
)
from support.workloads import SETTINGS, small_config, workloads

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree


@pytest.mark.parametrize("engine", ["sync", "async"])
@pytest.mark.parametrize("policy", POLICIES)
def test_shipped_trace_identical(policy: str, engine: str) -> None:
    summary = assert_same(trace_config(policy, engine, "azure-conv-2023", starved=False))
    if (policy, engine) in JUMPING:  # static batching jumps only while nobody waits
        assert summary["fast_forward_steps"] > (0 if policy in STATIC else summary["num_steps"] // 3)
    else:
        assert summary["fast_forward_steps"] == 0


@pytest.mark.parametrize("trace", ["azure-code-2023", "mooncake-synthetic"])
@pytest.mark.parametrize("policy,engine", sorted(JUMPING))
def test_other_traces_identical(policy: str, engine: str, trace: str) -> None:
    summary = assert_same(trace_config(policy, engine, trace, starved=False))
    assert summary["fast_forward_steps"] > 0


@pytest.mark.parametrize("engine", ["sync", "async"])
@pytest.mark.parametrize("policy", POLICIES)
def test_kv_starved_identical(policy: str, engine: str) -> None:
    summary = assert_same(trace_config(policy, engine, "azure-conv-2023", starved=True))
    if policy.startswith("vllm") or policy == "sarathi":
        assert summary["num_preemptions"] > 0  # the stretches end at, and resume after, preemptions


@pytest.mark.parametrize("policy,engine", sorted(JUMPING))
def test_aborts_caching_off_and_time_limit_identical(policy: str, engine: str) -> None:
    base = trace_config(policy, engine, "azure-conv-2023", starved=False)
    for extra in (
        dict(abort_fraction=0.3, abort_window_s=3.0),
        dict(enable_prefix_caching=False),
        dict(max_sim_time=4.0),
        dict(block_size=32, max_tokens_source="cap"),
    ):
        summary = assert_same(RunConfig(**{**base.__dict__, **extra}))
        assert summary["fast_forward_steps"] > 0, extra


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("engine", ["sync", "async"])
@settings(parent=SETTINGS, max_examples=6)
@given(wl=workloads(), blocks=st.integers(18, 60), seqs=st.integers(1, 6), seed=st.integers(0, 3))
def test_random_workloads_identical(
    policy: str, engine: str, wl: pd.DataFrame, blocks: int, seqs: int, seed: int
) -> None:
    wl = wl.assign(structured_output=wl["structured_output"] & (seed == 0))  # most runs can jump
    assert_same(small_config(policy, engine, blocks, seqs, seed), workload=wl, check_invariants=True)


@pytest.mark.parametrize("starved", [False, True])
@pytest.mark.parametrize("policy,engine", sorted(JUMPING))
def test_stopping_anywhere_leaves_identical_policy_state(
    policy: str, engine: str, starved: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = trace_config(policy, engine, "azure-conv-2023", starved=starved)
    assert assert_same_state_when_stopped(base, (1.37, 2.9, 4.41), monkeypatch) > 0


@pytest.mark.parametrize("policy,engine", sorted(VLLM_JUMPING))
@pytest.mark.parametrize(
    "extra",
    [
        dict(latency_model="table", model="llama-2-7b", gpu="a100-80gb"),  # measured profile
        dict(scheduling_policy="priority"),
        dict(model="llama-3.1-70b", tp=4, gpu="h200"),
        dict(
            max_num_batched_tokens=256, max_num_seqs=64, policy_options={"long_prefill_token_threshold": 64}
        ),
    ],
    ids=["table", "priority", "70b-tp4", "budget-bound"],
)
def test_latency_models_and_scheduler_options_identical(policy: str, engine: str, extra: dict) -> None:
    base = trace_config(policy, engine, "azure-conv-2023", starved=False)
    summary = assert_same(RunConfig(**{**base.__dict__, **extra}))
    assert summary["fast_forward_steps"] > 0


@pytest.mark.parametrize("policy,engine", sorted(JUMPING))
def test_fitted_step_model_without_closed_form_identical(policy: str, engine: str, tmp_path) -> None:
    """A latency model without decode_step_time: the jump builds each step's shape."""
    from schedsim.latency.calibrate import calibrate_from_args

    rows = [
        {"step_time_ms": 5.0 + 0.01 * p + 0.2 * d, "prefill_tokens": p, "decode_count": d}
        for p in (0, 64, 256, 1024)
        for d in (0, 1, 8, 32)
        if p or d
    ]
    pd.DataFrame(rows).to_csv(tmp_path / "steps.csv", index=False)

    class Args:
        profile, steps, cpu, out = None, str(tmp_path / "steps.csv"), False, str(tmp_path / "cal.json")
        model, gpu, tp, policy = "llama-3.1-8b", "h100-sxm", 1, "vllm"

    path, _ = calibrate_from_args(Args)
    base = trace_config(policy, engine, "azure-conv-2023", starved=False)
    cfg = RunConfig(**{**base.__dict__, "latency_model": "fitted", "latency_calibration": str(path)})
    assert not hasattr(simulate.__globals__["resolve_run"](cfg).latency_model, "decode_step_time")
    assert assert_same(cfg)["fast_forward_steps"] > 0
