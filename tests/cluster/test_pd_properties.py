"""Prefill/decode invariants over random workloads and pools, on vLLM, TensorRT-LLM and the test
policy: every request routed once per pool, KV bytes conserved across transfers, no request on
two replicas at once, every request accounted for, fast-forward exact, the same seed the same
tables."""

from __future__ import annotations

import io
from collections.abc import Iterator

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st
from schedsim import simulate
from support.pd_policy import registered
from support.workloads import SETTINGS, assert_accounted, small_config, workloads

pytestmark = pytest.mark.pure_python


@pytest.fixture(autouse=True, scope="module")
def pd_fcfs() -> Iterator[None]:
    """The test policy, registered while this module runs."""
    with registered():
        yield


POLICIES = ["vllm", "vllm-async", "trtllm:max-utilization", "trtllm:guaranteed-no-evict", "pd-fcfs"]
LINKS = ["ib-400g", "eth-100g", "custom:0.5:50"]
BLOCK_BYTES = 16 * 131072  # llama-3.1-8b, TP 1, blocks of 16


def parquet(df: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    df.to_parquet(buf)
    return buf.getvalue()


def pd_config(policy: str, p: int, d: int, link: str, blocks: int, seqs: int, **kw):
    return small_config(
        policy, "auto", blocks, seqs, 0, pd=f"{p}:{d}", interconnect=link, router="least-outstanding", **kw
    )


@SETTINGS
@given(
    wl=workloads(),
    policy=st.sampled_from(POLICIES),
    p=st.integers(1, 2),
    d=st.integers(1, 3),
    link=st.sampled_from(LINKS),
    blocks=st.integers(30, 80),
    seqs=st.integers(1, 6),
    fail=st.sampled_from([0.0, 0.3]),
    abort=st.floats(0.0, 0.05),
)
def test_pools_route_once_conserve_bytes_and_account_for_everything(
    wl: pd.DataFrame,
    policy: str,
    p: int,
    d: int,
    link: str,
    blocks: int,
    seqs: int,
    fail: float,
    abort: float,
) -> None:
    cfg = pd_config(
        policy, p, d, link, blocks, seqs, kv_load_failure_fraction=fail, abort_times={"q0": abort}
    )
    res = simulate(cfg, workload=wl, check_invariants=True)
    assert_accounted(res)
    req = res.requests.set_index("request_id")
    routing, tr = res.routing, res.transfers
    pre = routing[routing["pool"] == "prefill"]
    dec = routing[routing["pool"] == "decode"]
    # routed once per pool: every request to one prefill replica, at most once to the decode pool
    assert sorted(pre["request_id"]) == sorted(wl["request_id"])
    assert pre["replica"].between(0, p - 1).all() and dec["replica"].between(p, p + d - 1).all()
    assert dec["request_id"].is_unique and set(tr["request_id"]) <= set(dec["request_id"])
    assert tr["request_id"].is_unique  # one load per request
    # KV bytes conserved: whole blocks of the tokens loaded, each moved from its prefill replica
    # to its decode replica and delivered to both (every engine ended)
    assert (tr["blocks"] == -(-tr["tokens"] // 16)).all()
    assert (tr["bytes"] == tr["blocks"] * BLOCK_BYTES).all()
    assert (tr["tokens"] <= req.loc[tr["request_id"], "prompt_tokens"].to_numpy()).all()
    assert tr["end_time"].notna().all() and (tr["end_time"] >= tr["start_time"]).all()
    assert (tr["src_replica"].to_numpy() == req.loc[tr["request_id"], "prefill_replica"].to_numpy()).all()
    assert (tr["dst_replica"].to_numpy() == req.loc[tr["request_id"], "decode_replica"].to_numpy()).all()
    assert res.summary["kv_bytes_transferred"] == int(tr["bytes"].sum())
    # never on two replicas at once: the prefill side is done before its KV leaves, the decode
    # side computes only after the KV arrived
    own_pre = pd.concat([r.requests for r in res.replicas[:p]]).set_index("request_id")
    own_dec = pd.concat([r.requests for r in res.replicas[p:]]).set_index("request_id")
    for row in tr.itertuples():
        assert own_pre.loc[row.request_id, "finish_time"] <= row.start_time
        first = own_dec.loc[row.request_id, "first_scheduled_time"]
        assert np.isnan(first) or first >= row.end_time
    assert res.summary["num_requests"] == len(wl)


@SETTINGS
@given(wl=workloads(), policy=st.sampled_from(POLICIES), d=st.integers(1, 2), seqs=st.integers(1, 4))
def test_fast_forward_exact_and_the_same_seed_the_same_tables(
    wl: pd.DataFrame, policy: str, d: int, seqs: int
) -> None:
    wl = wl.assign(output_tokens=wl["output_tokens"] * 5)  # long enough decodes to jump
    on = simulate(pd_config(policy, 1, d, "ib-200g", 60, seqs), workload=wl)
    again = simulate(pd_config(policy, 1, d, "ib-200g", 60, seqs), workload=wl)
    off = simulate(pd_config(policy, 1, d, "ib-200g", 60, seqs, fast_forward=False), workload=wl)
    for name in ("requests", "steps", "timeline", "routing", "load", "transfers"):
        assert parquet(on.tables()[name]) == parquet(again.tables()[name]), name
        assert parquet(on.tables()[name]) == parquet(off.tables()[name]), name
