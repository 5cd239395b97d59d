"""Property tests over random workloads, for every registered policy and both engine loops."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schedsim import simulate
from schedsim.policies import get_policy_info, list_policies
from schedsim.run.resolve import resolve_run
from support.workloads import SETTINGS, assert_accounted, small_config, workloads

POLICIES = [info.name for info in list_policies()]


@pytest.mark.parametrize("policy", POLICIES)
@SETTINGS
@given(wl=workloads(), blocks=st.integers(18, 60), seqs=st.integers(1, 6), seed=st.integers(0, 3))
def test_invariants_and_accounting(policy: str, wl: pd.DataFrame, blocks: int, seqs: int, seed: int) -> None:
    res = simulate(small_config(policy, "auto", blocks, seqs, seed), workload=wl, check_invariants=True)
    assert_accounted(res)
    assert (res.steps["kv_usage"].between(0.0, 1.0)).all()


@pytest.mark.parametrize("policy", ["vllm", "vllm-async"])
@SETTINGS
@given(wl=workloads(), blocks=st.integers(18, 60), seqs=st.integers(1, 6), abort=st.floats(0.0, 0.3))
def test_aborts_are_accounted(policy: str, wl: pd.DataFrame, blocks: int, seqs: int, abort: float) -> None:
    cfg = small_config(policy, "auto", blocks, seqs, 0, abort_times={"q0": abort})
    res = simulate(cfg, workload=wl, check_invariants=True)
    assert_accounted(res)
    row = res.requests.iloc[0]
    if row["finish_reason"] == "abort":
        assert row["finish_time"] >= abort


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=5, deadline=None, derandomize=True)
@given(wl=workloads(), blocks=st.integers(18, 60), seqs=st.integers(1, 6))
def test_same_seed_gives_byte_identical_tables(policy: str, wl: pd.DataFrame, blocks: int, seqs: int) -> None:
    a = simulate(small_config(policy, "auto", blocks, seqs, 7), workload=wl)
    b = simulate(small_config(policy, "auto", blocks, seqs, 7), workload=wl)
    for name in ("requests", "steps", "timeline"):
        assert getattr(a, name).to_csv().encode() == getattr(b, name).to_csv().encode(), name


@SETTINGS
@given(
    wl=workloads(),
    blocks=st.integers(18, 60),
    seqs=st.integers(1, 6),
    seed=st.integers(0, 3),
    spec=st.integers(0, 3),
)
def test_sync_and_async_emit_the_same_tokens(
    wl: pd.DataFrame, blocks: int, seqs: int, seed: int, spec: int
) -> None:
    kw = {"num_spec_tokens": spec}
    sync = simulate(
        small_config("vllm", "auto", blocks, seqs, seed, **kw), workload=wl, check_invariants=True
    )
    asyn = simulate(
        small_config("vllm-async", "auto", blocks, seqs, seed, **kw), workload=wl, check_invariants=True
    )
    assert_accounted(sync)
    assert_accounted(asyn)
    assert sync.requests["output_hash"].tolist() == asyn.requests["output_hash"].tolist()
    assert sync.requests["num_output_tokens"].tolist() == asyn.requests["num_output_tokens"].tolist()


def reference_hashes(wl: pd.DataFrame, seed: int) -> list[int]:
    """Output hashes of requests that stop at EOS: the oracle's tokens up to the target."""
    from schedsim.metrics.recorder import output_hash
    from schedsim.policies import Request
    from schedsim.worlds.oracle import WorkloadOracle

    oracle = WorkloadOracle(seed)
    out = []
    for rid, p, t in zip(wl["request_id"], wl["prompt_tokens"], wl["output_tokens"], strict=True):
        oracle.add(rid, int(t))
        req = Request(rid, 0.0, int(p), 10**6)
        out.append(output_hash([oracle.token(req, i) for i in range(int(t))]))
    return out


def _engine_cases() -> list[tuple[str, str]]:
    """Every policy under the sync loop; under a batch queue those built for it, plus vllm (whose
    V1 scheduler also runs with batches in flight, as under pipeline parallelism)."""
    cases = []
    for name in POLICIES:
        cases.append((name, "sync"))
        natural = (
            get_policy_info(name)
            .make(**resolve_run(small_config(name, "auto", 40, 4, 0)).describe()["resolved_policy_options"])
            .max_concurrent_batches
        )
        if natural > 1 or name == "vllm":
            cases.append((name, "async"))
    return cases


@pytest.mark.parametrize("policy,engine", _engine_cases())
@settings(max_examples=4, deadline=None, derandomize=True)
@given(wl=workloads(), blocks=st.integers(18, 60), seqs=st.integers(1, 6))
def test_every_policy_under_both_engine_loops(
    policy: str, engine: str, wl: pd.DataFrame, blocks: int, seqs: int
) -> None:
    res = simulate(small_config(policy, engine, blocks, seqs, 1), workload=wl, check_invariants=True)
    assert_accounted(res)
    assert res.summary["engine"] == ("sync" if engine == "sync" else "batch_queue(depth=2)")
    req = res.requests
    stop = (req["finish_reason"] == "stop").to_numpy()
    ref = np.array(reference_hashes(wl, 1))
    assert (req["output_hash"].to_numpy()[stop] == ref[stop]).all()
    # the engines check EOS before the length caps: a request allowed its whole output stops at
    # its EOS under every policy, even where the EOS is its last allowed token
    whole = (req["target_output_tokens"] <= req["max_tokens"]) & (req["num_truncated_tokens"] == 0)
    ended = req[whole & req["finish_reason"].isin(["stop", "length"])]
    assert (ended["finish_reason"] == "stop").all(), ended
