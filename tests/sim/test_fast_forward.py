"""Exact fast-forward: every output table is byte-identical with it on and off (issue 8).

For every registered policy and both engine loops, on the shipped traces, on KV-starved pools
(preemptions, pauses, retractions) and on random hypothesis workloads. Where the policy supports
jumps (`vllm` sync, `vllm-async` with its batch queue) the tests also check that jumps happened,
so that equality is not the trivial kind.
"""

from __future__ import annotations

import dataclasses
import io
import json

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schedsim import RunConfig, simulate
from schedsim.policies import list_policies
from schedsim.policies.trtllm import LlmRequest
from test_sim_properties import SETTINGS, small_config, workloads

POLICIES = [info.name for info in list_policies()]
VLLM_JUMPING = {("vllm", "sync"), ("vllm-async", "async")}
TRTLLM_JUMPING = {(f"trtllm:{name}", "sync") for name in
                  ("max-requests", "guaranteed-no-evict", "static-batch", "max-utilization")}
JUMPING = VLLM_JUMPING | TRTLLM_JUMPING | {("orca", "sync"), ("sarathi", "sync"), ("static", "sync"),
                                           ("sglang-overlap", "async")}  # (policy, engine) pairs that jump
STATIC = ("static", "trtllm:static-batch")  # jump only while nobody waits for the next batch
DIAGNOSTICS = ("sim_wall_s", "fast_forward_jumps", "fast_forward_steps")


def _parquet(df: pd.DataFrame) -> bytes:
    """The table as the CLI writes it."""
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    return buf.getvalue()


def assert_same(cfg: RunConfig, workload: pd.DataFrame | None = None, **kw) -> dict:
    """Run with fast-forward off and on; every table and the summary must be identical."""
    off = simulate(RunConfig(**{**cfg.__dict__, "fast_forward": False, "record_itl": True}),
                   workload=workload, **kw)
    on = simulate(RunConfig(**{**cfg.__dict__, "fast_forward": True, "record_itl": True}),
                  workload=workload, **kw)
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
    for extra in (dict(abort_fraction=0.3, abort_window_s=3.0), dict(enable_prefix_caching=False),
                  dict(max_sim_time=4.0), dict(block_size=32, max_tokens_source="cap")):
        summary = assert_same(RunConfig(**{**base.__dict__, **extra}))
        assert summary["fast_forward_steps"] > 0, extra


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("engine", ["sync", "async"])
@settings(parent=SETTINGS, max_examples=6)
@given(wl=workloads(), blocks=st.integers(18, 60), seqs=st.integers(1, 6), seed=st.integers(0, 3))
def test_random_workloads_identical(policy: str, engine: str, wl: pd.DataFrame, blocks: int,
                                    seqs: int, seed: int) -> None:
    wl = wl.assign(structured_output=wl["structured_output"] & (seed == 0))  # most runs can jump
    assert_same(small_config(policy, engine, blocks, seqs, seed), workload=wl, check_invariants=True)


def _policy_state(policy) -> tuple:
    """Everything a later step could depend on: request counters, block tables, pool order, hashes."""
    kv = policy.kv
    reqs = sorted((r.request_id, r.status, r.num_computed_tokens, tuple(r.output_token_ids),
                   r.num_output_placeholders, r.num_in_flight_tokens, r.last_sched_seq,
                   tuple(r.block_hashes))
                  for r in (getattr(x, "request", x) for x in policy.requests.values()))  # trtllm wraps
    pool = kv.pool
    return (reqs, [r.request_id for r in getattr(policy, "running", ())],
            getattr(policy, "current_step", None), getattr(policy, "step_id", None),
            {k: list(v) for k, v in kv.req_to_blocks.items()}, dict(kv.num_cached_block),
            list(pool.free_queue), list(pool.ref_cnt), list(pool.block_hash), dict(pool.cached),
            kv.sched_step_seq, kv.processed_step_seq, list(kv.deferred_frees),
            _sglang_state(policy), _trtllm_state(policy))


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
        nodes.append((node.node_id, node.parent.node_id if node.parent else None, tuple(node.key),
                      tuple(node.value), node.lock_ref, node.last_access_time))
        stack.extend(node.children[k] for k in sorted(node.children, key=repr))
    req_kv = {rid: (st.prefix_len, st.cache_protected_len,
                    st.lock.node_id if st.lock else None,
                    st.last_node.node_id if st.last_node else None)
              for rid, st in policy.mem.req_kv.items()}
    return (policy.ratio.current, dict(policy.pool.slot_of), list(policy.pool.free_slots),
            policy.batch_is_full, dict(policy.max_new), nodes, tree.clock, tree.evictable_units,
            tree.protected_units, sorted(n.node_id for n in tree.evictable_leaves), req_kv,
            policy.policy.waiting_prefix_refresh_calls)


def _trtllm_state(policy) -> tuple | None:
    """TensorRT-LLM's own state: every LlmRequest field, the active order, counters, in-flight map."""
    if not hasattr(policy, "capacity_policy"):
        return None
    fields = [f.name for f in dataclasses.fields(LlmRequest) if f.name != "request"]
    reqs = [(r.request_id, *(getattr(r, f) for f in fields)) for r in policy.active]
    return (reqs, dict(policy.inflight), list(policy.finished_req_ids), policy.iter_counter,
            dataclasses.astuple(policy.stats))


def assert_same_state_when_stopped(cfg: RunConfig, untils: tuple[float, ...],
                                  monkeypatch: pytest.MonkeyPatch,
                                  workload: pd.DataFrame | None = None) -> int:
    """Stop runs at each time with fast-forward off and on: the policies themselves must be equal
    (block ids and the free queue never reach the tables). Returns the steps jumped."""
    import importlib

    sim_module = importlib.import_module("schedsim.run.simulate")  # the module, not the function
    made: list = []
    real_make = sim_module.make_policy
    monkeypatch.setattr(sim_module, "make_policy", lambda *a, **k: made.append(real_make(*a, **k))
                        or made[-1])
    jumped = 0
    for until in untils:
        states = []
        for ff in (False, True):
            res = simulate(RunConfig(**{**cfg.__dict__, "fast_forward": ff, "max_sim_time": until}),
                           workload=workload)
            states.append(_policy_state(made[-1]))
        assert states[0] == states[1], until
        jumped += res.summary["fast_forward_steps"]
    return jumped


@pytest.mark.parametrize("starved", [False, True])
@pytest.mark.parametrize("policy,engine", sorted(JUMPING))
def test_stopping_anywhere_leaves_identical_policy_state(policy: str, engine: str, starved: bool,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    base = trace_config(policy, engine, "azure-conv-2023", starved=starved)
    assert assert_same_state_when_stopped(base, (1.37, 2.9, 4.41), monkeypatch) > 0


@pytest.mark.parametrize("policy,engine", sorted(VLLM_JUMPING))
@pytest.mark.parametrize("extra", [
    dict(latency_model="table", model="llama-2-7b", gpu="a100-80gb"),  # measured profile
    dict(scheduling_policy="priority"),
    dict(model="llama-3.1-70b", tp=4, gpu="h200"),
    dict(max_num_batched_tokens=256, max_num_seqs=64,
         policy_options={"long_prefill_token_threshold": 64}),
], ids=["table", "priority", "70b-tp4", "budget-bound"])
def test_latency_models_and_scheduler_options_identical(policy: str, engine: str, extra: dict) -> None:
    base = trace_config(policy, engine, "azure-conv-2023", starved=False)
    summary = assert_same(RunConfig(**{**base.__dict__, **extra}))
    assert summary["fast_forward_steps"] > 0


@pytest.mark.parametrize("policy,engine", sorted(JUMPING))
def test_fitted_step_model_without_closed_form_identical(policy: str, engine: str, tmp_path) -> None:
    """A latency model without decode_step_time: the jump builds each step's shape."""
    from schedsim.latency.calibration import calibrate_from_args

    rows = [{"step_time_ms": 5.0 + 0.01 * p + 0.2 * d, "prefill_tokens": p, "decode_count": d}
            for p in (0, 64, 256, 1024) for d in (0, 1, 8, 32) if p or d]
    pd.DataFrame(rows).to_csv(tmp_path / "steps.csv", index=False)

    class Args:
        profile, steps, cpu, out = None, str(tmp_path / "steps.csv"), False, str(tmp_path / "cal.json")
        model, gpu, tp, policy = "llama-3.1-8b", "h100-sxm", 1, "vllm"

    path, _ = calibrate_from_args(Args)
    base = trace_config(policy, engine, "azure-conv-2023", starved=False)
    cfg = RunConfig(**{**base.__dict__, "latency_model": "fitted", "latency_calibration": str(path)})
    assert not hasattr(simulate.__globals__["resolve_run"](cfg).latency_model, "decode_step_time")
    assert assert_same(cfg)["fast_forward_steps"] > 0
