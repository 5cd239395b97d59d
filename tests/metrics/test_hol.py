"""HeadOfLineTracker: who is charged after a schedule that left seats and budget."""

from __future__ import annotations

from schedsim.metrics.hol import HeadOfLineTracker
from schedsim.metrics.workload import WorkloadColumns
from schedsim.policies import Request, StepPlan


def _tracker(priority: bool = False, chunked: bool = True) -> tuple[HeadOfLineTracker, list[Request]]:
    reqs = [
        Request("big", 0.0, 900, 5, priority=1),
        Request("small", 0.1, 50, 5, priority=0),
        Request("mid", 0.2, 300, 5, priority=2),
    ]
    # 10 usable blocks of 16 tokens: 160 tokens free at kv_usage 0
    t = HeadOfLineTracker(
        WorkloadColumns.from_requests(reqs),
        max_num_seqs=8,
        max_num_batched_tokens=512,
        chunked=chunked,
        block_size=16,
        usable_blocks=10,
        priority=priority,
    )
    for i in range(3):
        t.added(i)
    return t, reqs


def test_fcfs_head_is_the_blocker_and_only_fitting_requests_are_charged():
    t, _ = _tracker(chunked=False)
    t.step(1.0, StepPlan(), running=1, kv_usage=0.0)
    t.step(1.5, StepPlan(), running=1, kv_usage=0.0)
    assert t.per_request().tolist() == [0.0, 0.5, 0.0]  # mid needs 300 > 160 free tokens


def test_priority_head_is_the_most_urgent_waiting_request():
    t, _ = _tracker(priority=True, chunked=False)
    t.step(1.0, StepPlan(), running=1, kv_usage=0.0)
    t.step(2.0, StepPlan(), running=1, kv_usage=0.0)
    assert t.per_request().tolist() == [0.0, 0.0, 0.0]  # "small" heads the queue itself


def test_no_charge_without_seats_or_budget_or_after_preemption_and_none_once_scheduled():
    t, _ = _tracker(chunked=False)
    t.step(1.0, StepPlan(), running=8, kv_usage=0.0)  # no seat left
    t.step(2.0, StepPlan(total_num_scheduled_tokens=512), running=1, kv_usage=0.0)  # no budget
    t.step(3.0, StepPlan(preempted_req_ids=["x"]), running=1, kv_usage=0.0)  # preempting step
    t.left(1)
    t.step(4.0, StepPlan(resumed_req_ids=["x"]), running=1, kv_usage=0.0)
    t.step(5.0, StepPlan(), running=1, kv_usage=0.0)
    assert t.per_request().tolist() == [0.0, 0.0, 0.0]


def test_a_preempted_request_waiting_to_resume_blocks_everyone_behind_it():
    t, _ = _tracker(chunked=True)
    t.step(1.0, StepPlan(preempted_req_ids=["old"]), running=1, kv_usage=0.0)
    t.step(2.0, StepPlan(), running=1, kv_usage=0.0)  # "old" still waiting at the front
    t.step(2.25, StepPlan(), running=1, kv_usage=0.0)
    # chunked: every chunk min(prompt, 512) must fit 160 free tokens: only "small" fits
    assert t.per_request().tolist() == [0.0, 0.25, 0.0]
