"""Cluster invariants over random workloads, fleets and routers: every request routed once and
served only where it was routed, every request accounted for, fast-forward exact."""

from __future__ import annotations

import io

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st
from schedsim import simulate
from schedsim.policies.routers import list_routers
from support.workloads import SETTINGS, assert_accounted, small_config, workloads

pytestmark = pytest.mark.pure_python

ROUTERS = [r.name for r in list_routers()]


def parquet(df: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    df.to_parquet(buf)
    return buf.getvalue()


@SETTINGS
@given(
    wl=workloads(),
    replicas=st.integers(2, 4),
    router=st.sampled_from(ROUTERS),
    policy=st.sampled_from(["vllm", "vllm-async", "trtllm:max-utilization", "sglang-overlap"]),
    blocks=st.integers(18, 60),
    seqs=st.integers(1, 6),
    abort=st.floats(0.0, 0.05),
)
def test_routed_once_served_once_all_accounted(
    wl: pd.DataFrame, replicas: int, router: str, policy: str, blocks: int, seqs: int, abort: float
) -> None:
    wl = wl.assign(session_id=[f"s{i % 3}" for i in range(len(wl))])
    if router == "prefix-precise" and not policy.startswith("vllm"):
        router = "prefix-aware"  # only vLLM's block pool publishes its block index here
    kw = {"replicas": replicas, "router": router, "abort_times": {"q0": abort}}
    res = simulate(small_config(policy, "auto", blocks, seqs, 0, **kw), workload=wl, check_invariants=True)
    assert_accounted(res)
    routing = res.routing
    assert sorted(routing["request_id"]) == sorted(wl["request_id"])  # each exactly once
    where = dict(zip(routing["request_id"], routing["replica"], strict=True))
    assert dict(zip(res.requests["request_id"], res.requests["replica"], strict=True)) == where
    for i, rep in enumerate(res.replicas):
        touched = rep.requests[
            rep.requests["first_scheduled_time"].notna() | rep.requests["finish_reason"].notna()
        ]
        assert all(where[r] == i for r in touched["request_id"])  # never on two replicas
    assert res.summary["num_requests"] == len(wl)
    finished = sum(r.summary["num_finished"] for r in res.replicas)
    assert finished == res.summary["num_finished"]


@SETTINGS
@given(
    wl=workloads(),
    replicas=st.integers(2, 3),
    router=st.sampled_from(ROUTERS),
    seqs=st.integers(1, 4),
    scrape=st.sampled_from([0.0, 0.02]),
)
def test_fast_forward_exact_in_any_fleet(
    wl: pd.DataFrame, replicas: int, router: str, seqs: int, scrape: float
) -> None:
    wl = wl.assign(output_tokens=wl["output_tokens"] * 5)  # long enough decodes to jump
    kw = {"replicas": replicas, "router": router, "scrape_interval_s": scrape}
    on = simulate(small_config("vllm-async", "auto", 60, seqs, 0, **kw), workload=wl)
    off = simulate(small_config("vllm-async", "auto", 60, seqs, 0, fast_forward=False, **kw), workload=wl)
    for name in ("requests", "steps", "timeline", "routing", "load"):
        assert parquet(on.tables()[name]) == parquet(off.tables()[name]), name
