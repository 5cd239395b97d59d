"""Fast-forward on against off: byte-identical tables and identical policy state, for any config."""

from __future__ import annotations

import dataclasses
import io
import json

import pandas as pd
import pytest
from schedsim import RunConfig, simulate
from schedsim.policies import list_policies
from schedsim.policies.trtllm import LlmRequest

POLICIES = [info.name for info in list_policies()]


VLLM_JUMPING = {("vllm", "sync"), ("vllm-async", "async")}


TRTLLM_JUMPING = {
    (f"trtllm:{name}", "sync")
    for name in ("max-requests", "guaranteed-no-evict", "static-batch", "max-utilization")
}


JUMPING = (
    VLLM_JUMPING
    | TRTLLM_JUMPING
    | {("orca", "sync"), ("sarathi", "sync"), ("static", "sync"), ("sglang-overlap", "async")}
)  # (policy, engine) pairs that jump


STATIC = ("static", "trtllm:static-batch")  # jump only while nobody waits for the next batch


DIAGNOSTICS = ("sim_wall_s", "fast_forward_jumps", "fast_forward_steps")


def _parquet(df: pd.DataFrame) -> bytes:
    """The table as the CLI writes it."""
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    return buf.getvalue()


def assert_same(cfg: RunConfig, workload: pd.DataFrame | None = None, **kw) -> dict:
    """Run with fast-forward off and on; every table and the summary must be identical."""
    off = simulate(
        RunConfig(**{**cfg.__dict__, "fast_forward": False, "record_itl": True}), workload=workload, **kw
    )
    on = simulate(
        RunConfig(**{**cfg.__dict__, "fast_forward": True, "record_itl": True}), workload=workload, **kw
    )
    for name in ("requests", "steps", "timeline", "itl"):
        a, b = getattr(off, name), getattr(on, name)
        assert list(a.dtypes) == list(b.dtypes), name
        assert a.equals(b), f"{name} differs with fast-forward on"
        assert _parquet(a) == _parquet(b), name

    def strip(summary: dict) -> str:
        return json.dumps({k: v for k, v in summary.items() if k not in DIAGNOSTICS}, sort_keys=True)

    assert strip(off.summary) == strip(on.summary)  # as JSON: NaN equals NaN
    assert off.summary["fast_forward_steps"] == 0
    return on.summary


def trace_config(policy: str, engine: str, trace: str, starved: bool) -> RunConfig:
    """The first requests of a shipped trace, on the default pool or a KV-starved one."""
    kw = dict(num_gpu_blocks=300, max_model_len=4096, max_num_seqs=32) if starved else {}
    return RunConfig(policy=policy, engine=engine, trace=trace, max_requests=60, rate=8.0, **kw)


def policy_state(policy) -> tuple:
    """Everything a later step could depend on: request counters, block tables, pool order, hashes."""
    kv = policy.kv
    reqs = sorted(
        (
            r.request_id,
            r.status,
            r.num_computed_tokens,
            tuple(r.output_token_ids),
            r.num_output_placeholders,
            r.num_in_flight_tokens,
            r.last_sched_seq,
            tuple(r.block_hashes),
        )
        for r in (getattr(x, "request", x) for x in policy.requests.values())
    )  # trtllm wraps
    common = (
        reqs,
        [r.request_id for r in getattr(policy, "running", ())],
        getattr(policy, "current_step", None),
        getattr(policy, "step_id", None),
        _sglang_state(policy),
        _trtllm_state(policy),
    )
    if hasattr(kv, "snapshot"):  # TensorRT-LLM's own block manager (policies/trtllm)
        return (*common, kv.snapshot())
    pool = kv.pool
    return (
        *common,
        {k: list(v) for k, v in kv.req_to_blocks.items()},
        dict(kv.num_cached_block),
        list(pool.free_queue),
        list(pool.ref_cnt),
        list(pool.block_hash),
        dict(pool.cached),
        kv.sched_step_seq,
        kv.processed_step_seq,
        list(kv.deferred_frees),
    )


def _sglang_state(policy) -> tuple | None:
    """SGLang's own per-step state: the new-token ratio, request-pool rows, the full flag, the
    radix tree (every node's key, blocks, locks and recency, the clock) and each request's tree
    state."""
    if not hasattr(policy, "ratio"):
        return None
    tree = policy.tree_cache
    nodes = []
    stack = [tree.root]
    while stack:
        node = stack.pop()
        nodes.append(
            (
                node.node_id,
                node.parent.node_id if node.parent else None,
                tuple(node.key),
                tuple(node.value),
                node.lock_ref,
                node.last_access_time,
            )
        )
        stack.extend(node.children[k] for k in sorted(node.children, key=repr))
    req_kv = {
        rid: (
            st.prefix_len,
            st.cache_protected_len,
            st.lock.node_id if st.lock else None,
            st.last_node.node_id if st.last_node else None,
        )
        for rid, st in policy.mem.req_kv.items()
    }
    return (
        policy.ratio.current,
        dict(policy.pool.slot_of),
        list(policy.pool.free_slots),
        policy.batch_is_full,
        dict(policy.max_new),
        nodes,
        tree.clock,
        tree.evictable_units,
        tree.protected_units,
        sorted(n.node_id for n in tree.evictable_leaves),
        req_kv,
        policy.policy.waiting_prefix_refresh_calls,
    )


def _trtllm_state(policy) -> tuple | None:
    """TensorRT-LLM's own state: every LlmRequest field, the active order, counters, in-flight ids."""
    if not hasattr(policy, "capacity_policy"):
        return None
    # every attribute and derived property (methods excluded), interpreted or compiled
    fields = [f for f in dir(LlmRequest) if not f.startswith("__") and not callable(getattr(LlmRequest, f))]
    fields.remove("request")
    reqs = [(r.request_id, *(getattr(r, f) for f in fields)) for r in policy.active]
    queued = [r.request_id for r in policy.waiting]
    return (
        reqs,
        queued,
        sorted(policy.inflight),
        list(policy.finished_req_ids),
        policy.iter_counter,
        dataclasses.astuple(policy.stats),
    )


def assert_same_state_when_stopped(
    cfg: RunConfig,
    untils: tuple[float, ...],
    monkeypatch: pytest.MonkeyPatch,
    workload: pd.DataFrame | None = None,
) -> int:
    """Stop runs at each time with fast-forward off and on: the policies themselves must be equal
    (block ids and the free queue never reach the tables). Returns the steps jumped."""
    import importlib

    sim_module = importlib.import_module("schedsim.run.simulate")  # the module, not the function
    made: list = []
    real_make = sim_module.make_policy
    monkeypatch.setattr(
        sim_module, "make_policy", lambda *a, **k: made.append(real_make(*a, **k)) or made[-1]
    )
    jumped = 0
    for until in untils:
        states = []
        for ff in (False, True):
            res = simulate(
                RunConfig(**{**cfg.__dict__, "fast_forward": ff, "max_sim_time": until}), workload=workload
            )
            states.append(policy_state(made[-1]))
        assert states[0] == states[1], until
        jumped += res.summary["fast_forward_steps"]
    return jumped
