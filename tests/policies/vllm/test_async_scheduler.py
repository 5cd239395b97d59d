"""Scenario tests of `vllm-async` (after vLLM's test_async_scheduler.py / test_deferred_block_free.py)."""

from __future__ import annotations

import pytest
from schedsim.policies import RequestStatus
from support.vllm_helpers import EOS, BatchQueue, make, mkreq

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree


@pytest.mark.parametrize("max_tokens", [1, 2, 3, 5])
def test_async_max_tokens_schedules_no_extra_step(max_tokens):
    p = make("vllm-async")
    bq = BatchQueue(p)
    p.add_request(mkreq("r", 10, max_tokens=max_tokens))
    total = 0
    for _ in range(20):
        plan, _ = bq.step()
        total += plan.num_scheduled_tokens.get("r", 0)
    assert total == 10 + max_tokens - 1
    assert not p.has_unfinished_requests()


def test_async_placeholders_and_in_flight_counters():
    p = make("vllm-async")
    bq = BatchQueue(p)
    p.add_request(mkreq("r", 10, max_tokens=50))
    plan0, _ = bq.step()
    r = p.requests["r"]
    assert (r.num_computed_tokens, r.num_output_placeholders, r.num_in_flight_tokens) == (10, 1, 10)
    plan1, outs = bq.step()  # scheduled before step 0's token is known, then step 0 settles
    assert plan1.num_scheduled_tokens == {"r": 1}
    assert [(o.request_id, o.new_token_ids) for o in outs] == [("r", [100])]
    assert r.num_output_placeholders == 1  # step 0 resolved, step 1 owed
    assert r.output_token_ids == [100] and r.num_computed_tokens == 11 and r.num_in_flight_tokens == 1


def test_async_abort_ordering_drops_in_flight_outputs():
    p = make("vllm-async")
    bq = BatchQueue(p)
    for i in range(10):
        p.add_request(mkreq(f"r{i}", 8, max_tokens=100, arrival=float(i)))
    order = [3, 7, 0, 9, 1, 5, 2, 8, 4, 6]
    reqs = {f"r{i}": p.requests[f"r{i}"] for i in range(10)}
    bq.step()
    for i in order:
        aborted = p.abort_requests([f"r{i}"])
        assert [a.request_id for a in aborted] == [f"r{i}"]
        plan, _ = bq.step()
        assert f"r{i}" in plan.finished_req_ids and f"r{i}" not in plan.num_scheduled_tokens
    for _ in range(3):
        bq.step()
    for pos, i in enumerate(order):
        req = reqs[f"r{i}"]
        assert req.status == RequestStatus.FINISHED_ABORTED
        assert len(req.output_token_ids) == pos  # the in-flight step's token was dropped
    assert p.abort_requests(["r3"]) == [] and p.kv.num_free_blocks == 9999


def test_async_preemption_stale_output_delivered_once():
    p = make("vllm-async", max_num_batched_tokens=100, num_gpu_blocks=11, max_model_len=160)
    bq = BatchQueue(p)
    p.add_request(mkreq("r0", 80, max_tokens=20))
    p.add_request(mkreq("r1", 79, max_tokens=20, arrival=1.0))
    plan, _ = bq.step()
    assert plan.num_scheduled_tokens == {"r0": 80, "r1": 20}
    seen_preempt = False
    r1 = p.requests["r1"]
    for _ in range(60):
        plan, _ = bq.step()
        seen_preempt |= bool(plan.preempted_req_ids)
        for req in p.requests.values():
            assert req.num_output_placeholders >= 0
    assert seen_preempt and not p.has_unfinished_requests()
    assert r1.num_preemptions == 1 and len(r1.output_token_ids) == 20  # stale token kept once


def test_deferred_free_waits_for_the_in_flight_step():
    p = make("vllm-async", defer_block_free=True, num_gpu_blocks=100, max_model_len=512)
    bq = BatchQueue(p)
    p.add_request(mkreq("r", 16, max_tokens=10))
    bq.step(tokens={"r": [EOS]})  # step 0: prefill, samples EOS
    _, outs = bq.step()  # step 1 schedules r's decode; then step 0's EOS stops r
    assert [o.finish_reason for o in outs] == [RequestStatus.FINISHED_STOPPED]
    assert p.kv.num_deferred_blocks == 2 and p.kv.num_free_blocks == 99 - 2
    p.check_invariants()
    plan2, _ = bq.step()  # update from step 1: its fence passes, blocks return
    assert plan2.num_scheduled_tokens == {} and plan2.finished_req_ids == ["r"]
    assert p.kv.num_deferred_blocks == 0 and p.kv.num_free_blocks == 99


def test_deferred_free_is_immediate_without_a_step_in_flight():
    p = make("vllm", defer_block_free=True, num_gpu_blocks=100, max_model_len=512)
    bq = BatchQueue(p)
    p.add_request(mkreq("r", 16, max_tokens=10))
    _, outs = bq.step(tokens={"r": [EOS]})
    assert [o.finish_reason for o in outs] == [RequestStatus.FINISHED_STOPPED]
    assert p.kv.num_deferred_blocks == 0 and p.kv.num_free_blocks == 99
