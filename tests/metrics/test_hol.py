"""HeadOfLineTracker: who is charged after a schedule that left seats and budget."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from schedsim.metrics.hol import NO_JUDGEMENT, HeadOfLineTracker
from schedsim.metrics.workload import WorkloadColumns
from schedsim.policies import Request, StepPlan


def _tracker_for(reqs: list[Request], chunked: bool, priority: bool) -> HeadOfLineTracker:
    """10 usable blocks of 16 tokens, 8 seats, a budget of 512 tokens."""
    return HeadOfLineTracker(
        WorkloadColumns.from_requests(reqs),
        max_num_seqs=8,
        max_num_batched_tokens=512,
        chunked=chunked,
        block_size=16,
        usable_blocks=10,
        priority=priority,
    )


def _tracker(priority: bool = False, chunked: bool = True) -> tuple[HeadOfLineTracker, list[Request]]:
    reqs = [
        Request("big", 0.0, 900, 5, priority=1),
        Request("small", 0.1, 50, 5, priority=0),
        Request("mid", 0.2, 300, 5, priority=2),
    ]
    t = _tracker_for(reqs, chunked, priority)  # 160 tokens free at kv_usage 0
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


Event = tuple[str, int, int, int]  # (kind, request index, free blocks after the step, tokens scheduled)


def _play_event(t: HeadOfLineTracker, n: int, event: Event, now: float) -> None:
    """An arrival, a first schedule, or a schedule (preempting one request, or resuming the oldest
    preempted one) at `now`, over n requests."""
    kind, idx, free, scheduled = event
    i = idx % n
    if kind == "add":
        t.added(i)
    elif kind == "left":
        t.left(i)
    else:
        plan = StepPlan(total_num_scheduled_tokens=scheduled)
        if kind == "preempt":
            plan.preempted_req_ids = [f"p{idx}"]
        elif kind == "resume":
            plan.resumed_req_ids = list(t.preempted)[:1]
        t.step(now, plan, running=1, kv_usage=1.0 - free / 10)


def _prompt_lists(max_size: int) -> st.SearchStrategy[list[int]]:
    """Prompt lengths, some a whole number of blocks: exactly at a free-token limit."""
    return st.lists(
        st.one_of(st.integers(1, 400), st.integers(1, 12).map(lambda b: 16 * b)),
        min_size=1,
        max_size=max_size,
    )


def _event_lists(kinds: list[str], max_idx: int) -> st.SearchStrategy[list[Event]]:
    """Up to 40 events of the given kinds (repeats weight them) on requests 0 .. max_idx."""
    return st.lists(
        st.tuples(
            st.sampled_from(kinds),
            st.integers(0, max_idx),
            st.integers(0, 10),  # free blocks after the step (of 10)
            st.integers(0, 600),  # tokens the step scheduled
        ),
        max_size=40,
    )


def _requests(prompts: list[int]) -> list[Request]:
    """One request per prompt, arriving in order, priorities cycling 0, 1, 2."""
    return [Request(f"r{i}", 0.1 * i, p, 5, priority=i % 3) for i, p in enumerate(prompts)]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    prompts=_prompt_lists(12),
    events=_event_lists(["step", "step", "step", "add", "left", "preempt", "resume"], 11),
    chunked=st.booleans(),
    priority=st.booleans(),
)
def test_keeping_the_blocked_set_equals_judging_afresh(
    prompts: list[int], events: list[Event], chunked: bool, priority: bool
) -> None:
    """A judgement that keeps the blocked set (same queue, a lower limit they all meet) charges
    exactly what judging every schedule from scratch charges, whatever the queue does."""
    reqs = _requests(prompts)
    kept, fresh = _tracker_for(reqs, chunked, priority), _tracker_for(reqs, chunked, priority)
    for t in (kept, fresh):  # a queue to start with
        for i in range(len(reqs)):
            t.added(i)
    now = 0.0
    for event in events:
        for t in (kept, fresh):
            _play_event(t, len(reqs), event, now)
        fresh.judged = NO_JUDGEMENT  # forget the last judgement: judge afresh every time
        now += 0.125 + 0.01 * event[1]
    assert kept.per_request().tolist() == fresh.per_request().tolist()


def test_a_resume_that_empties_the_preempted_set_is_judged_afresh():
    """The queue's head is blocked behind a preempted request, then (the same queue, the same
    limit) it is the blocker itself once that request resumes: it is no longer charged."""
    t, _ = _tracker(chunked=True)
    t.left(0)  # "big" was scheduled: "small" heads the queue
    t.step(1.0, StepPlan(preempted_req_ids=["old"]), running=1, kv_usage=0.0)
    t.step(2.0, StepPlan(), running=1, kv_usage=0.0)  # "old" waits at the front: "small" is behind it
    t.step(3.0, StepPlan(resumed_req_ids=["old"]), running=1, kv_usage=0.0)
    t.step(4.0, StepPlan(), running=1, kv_usage=0.0)
    assert t.per_request().tolist() == [0.0, 1.0, 0.0]  # charged from 2.0 to 3.0 only


def _reference_charges(
    prompts: list[int],
    events: list[Event],
    chunked: bool,
    priority: bool,
) -> list[float]:
    """The module docstring's rule, request by request over the whole queue (no window, no
    kept judgement): the oracle the vectorised tracker must equal."""
    waiting: set[int] = set()
    preempted: dict[str, None] = {}  # in preemption order: a resume takes the oldest
    hol = [0.0] * len(prompts)
    blocked: list[int] = []
    now = since = 0.0
    for kind, idx, free, scheduled in events:
        i = idx % len(prompts)
        if kind == "add":
            waiting.add(i)
        elif kind == "left":
            waiting.discard(i)
        else:
            for j in blocked:
                hol[j] += now - since
            since, blocked = now, []
            if kind == "preempt":
                preempted[f"p{idx}"] = None
            elif kind == "resume" and preempted:
                del preempted[next(iter(preempted))]
            budget = 512 - scheduled
            if waiting and kind != "preempt" and budget > 0:
                free_tokens = free * 16
                queue = sorted(waiting, key=lambda j: (j % 3, j) if priority else j)
                behind = queue if preempted else queue[1:]  # the head blocks, or waits behind them
                if chunked:  # a first chunk of min(prompt, budget) tokens needs free KV
                    blocked = [j for j in behind if min(prompts[j], budget) <= free_tokens]
                else:  # the whole prompt needs both
                    blocked = [j for j in behind if prompts[j] <= min(budget, free_tokens)]
        now += 0.125 + 0.01 * idx
    for j in blocked:
        hol[j] += now - since
    return hol


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    prompts=_prompt_lists(10),
    events=_event_lists(["step", "step", "add", "add", "left", "preempt", "resume"], 9),
    chunked=st.booleans(),
    priority=st.booleans(),
)
def test_charges_equal_the_rule_applied_request_by_request(
    prompts: list[int], events: list[Event], chunked: bool, priority: bool
) -> None:
    """Requests reach the engine in any order, leave and come back, the queue empties and refills:
    every request is charged what the rule, applied to each waiting request, charges it."""
    reqs = _requests(prompts)
    t = _tracker_for(reqs, chunked, priority)
    now = 0.0
    for event in events:
        _play_event(t, len(reqs), event, now)
        now += 0.125 + 0.01 * event[1]
    t.charge(now)  # the last blocked set, charged up to `now` (as the reference does)
    assert t.per_request().tolist() == _reference_charges(prompts, events, chunked, priority)
