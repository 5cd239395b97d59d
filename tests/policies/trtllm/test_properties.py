"""Property tests over random workloads, for every capacity policy x chunking policy.

Each step keeps every invariant (KV blocks conserved, one sequence per started request, cursors and
block tables in step). A run either finishes every request with the pool whole again, or stops
where TensorRT-LLM itself stops: guaranteed-no-evict and static batch wedged behind a head-of-line
miss (then the opt-in `started_contexts_in_first_pass` finishes the same workload), or a batch the
KV pool or the token budget cannot take after the capacity and micro-batch schedulers admitted it
on reuse estimates.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from schedsim.policies import make_policy
from schedsim.policies.trtllm import KvCacheExhausted, SchedulerWedged, TokenBudgetExceeded, TrtllmFailure
from support.trtllm_driver import BLOCK, RunLog, make_request, run, run_pipelined, workloads

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree

CAPACITY = ["max-requests", "guaranteed-no-evict", "static-batch", "max-utilization"]
CHUNKING = ["equal-progress", "first-come-first-served", "force-chunk"]
# Where each capacity policy may stop the way TensorRT-LLM does (max-requests has no KV manager:
# its block tables never run short).
STOPS: dict[str, tuple[type[TrtllmFailure], ...]] = {
    "max-requests": (),
    "guaranteed-no-evict": (SchedulerWedged, KvCacheExhausted, TokenBudgetExceeded),
    "static-batch": (SchedulerWedged, KvCacheExhausted, TokenBudgetExceeded),
    "max-utilization": (KvCacheExhausted, TokenBudgetExceeded),
}


def _assert_pool_whole(policy, knobs: dict) -> None:
    """Every block is free again; only max-requests (no KV manager) may have grown past the pool."""
    kv = policy.kv
    assert kv.num_free_blocks == kv.num_blocks
    assert kv.num_blocks == knobs["num_gpu_blocks"] - 1 or policy.acct is None


def _run_or_stop(capacity: str, policy, arrivals, runner) -> RunLog | TrtllmFailure:
    """The run's log, or the documented TensorRT-LLM stop it ended in."""
    try:
        return runner(policy, arrivals)
    except TrtllmFailure as stop:
        event(f"stopped: {stop.cause}")
        assert isinstance(stop, STOPS[capacity]), f"{capacity} stopped with {stop!r}"
        assert stop.request_ids and all(rid in str(stop) for rid in stop.request_ids)
        if isinstance(stop, SchedulerWedged):
            with pytest.raises(SchedulerWedged):  # a fixed point: nothing can ever run again
                policy.schedule()
        return stop


@pytest.mark.parametrize("chunking", CHUNKING)
@pytest.mark.parametrize("capacity", CAPACITY)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=workloads())
def test_random_workloads_conserve_kv_and_finish(capacity, chunking, data):
    reqs, knobs = data
    policy = make_policy(
        f"trtllm:{capacity}", block_size=BLOCK, max_model_len=256, chunking_policy=chunking, **knobs
    )
    # run() checks every invariant after each step: KV conservation, and the capacity pass's
    # fitting and paused requests disjoint and within the batch cap
    tag = f"{capacity}/{chunking}"
    arrivals = [
        (step, make_request(f"{tag}/{i}", p, o, hashes=h, **extra)) for step, i, p, o, h, extra in reqs
    ]
    log = _run_or_stop(capacity, policy, arrivals, lambda p, a: run(p, a, max_steps=4000))
    if isinstance(log, SchedulerWedged):
        opted = make_policy(
            f"trtllm:{capacity}",
            block_size=BLOCK,
            max_model_len=256,
            chunking_policy=chunking,
            started_contexts_in_first_pass=True,
            **knobs,
        )
        arrivals = [
            (step, make_request(f"{tag}/opt{i}", p, o, hashes=h, **extra)) for step, i, p, o, h, extra in reqs
        ]
        log = _run_or_stop(capacity, opted, arrivals, lambda p, a: run(p, a, max_steps=4000))
        assert not isinstance(log, SchedulerWedged), "started contexts in the first pass still wedged"
        policy = opted
    if isinstance(log, TrtllmFailure):
        return
    for plan in log.plans:
        assert not set(plan.paused_req_ids) & set(plan.num_scheduled_tokens), "fitting and paused"
        assert plan.total_num_scheduled_tokens <= policy.config.effective_max_num_tokens
        assert len(plan.num_scheduled_tokens) <= policy.config.effective_max_batch_size
    assert len(log.finished) == len(arrivals), f"unfinished: {[r.request_id for r in policy.active]}"
    if capacity in ("guaranteed-no-evict", "static-batch"):
        assert policy.stats.num_pauses == 0
    _assert_pool_whole(policy, knobs)
    for _, request in arrivals:
        assert 1 <= len(request.output_token_ids) <= request.max_tokens


@pytest.mark.parametrize("capacity", CAPACITY)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=workloads())
def test_two_micro_batches_in_flight_never_share_a_request(capacity, data):
    reqs, knobs = data
    knobs = {**knobs, "num_micro_batches": 2}
    policy = make_policy(f"trtllm:{capacity}", block_size=BLOCK, max_model_len=256, **knobs)
    assert policy.max_concurrent_batches == 2
    arrivals = [
        (step, make_request(f"pp/{capacity}/{i}", p, o, hashes=h, **extra))
        for step, i, p, o, h, extra in reqs
    ]
    # run_pipelined asserts disjoint batches and invariants
    log = _run_or_stop(capacity, policy, arrivals, lambda p, a: run_pipelined(p, a, depth=2))
    if isinstance(log, TrtllmFailure):
        return
    assert len(log.finished) == len(arrivals)
    _assert_pool_whole(policy, knobs)
