"""The TensorRT-LLM companion's stretches while requests wait (`TrtllmFastForward._queue_blocked`),
on a hand-driven policy: a generation decodes while a context that shares a stored prefix misses
on blocks. A jump (advance, an arrival taken at its poll, end_stretch) leaves the policy exactly
where the same steps one by one do, including the head's reuse estimate, which a decode's
allocation cuts by evicting a stored block; and the certificate refuses the states in which the
next schedule would pause a generation or admit a generation-only request."""

from __future__ import annotations

import pytest
from schedsim.policies import KVTransferParams, make_policy
from schedsim.policies.trtllm import TrtllmPolicy
from support.fastforward import policy_state
from support.trtllm_driver import TOKEN, make_request, oracle

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree

CAPACITIES = ["guaranteed-no-evict", "max-utilization"]
WARMUP = 20  # steps before the stretch: `gen` decodes, `head` waits
K = 15  # the stretch: its 14th allocation evicts one of `done`'s stored blocks


def _step(policy: TrtllmPolicy) -> None:
    plan = policy.schedule()
    policy.update_from_output(plan, oracle(policy, plan))


def _warmed(capacity: str) -> TrtllmPolicy:
    """16 usable blocks: `done` (four stored prompt blocks) has finished; `gen` holds 11 of the 16
    and `head` (96 tokens, its first four blocks `done`'s) needs six more than the five free."""
    policy = make_policy(
        f"trtllm:{capacity}",
        num_gpu_blocks=17,
        block_size=16,
        max_model_len=512,
        max_num_batched_tokens=512,
        max_num_seqs=4,
    )
    assert isinstance(policy, TrtllmPolicy)
    policy.add_request(make_request(f"{capacity}/done", 64, 1, hashes=(1, 2, 3, 4)))
    _step(policy)
    policy.add_request(make_request(f"{capacity}/gen", 160, 48, hashes=tuple(range(100, 110))))
    policy.add_request(make_request(f"{capacity}/head", 96, 16, hashes=(1, 2, 3, 4, 5, 6)))
    for _ in range(WARMUP):
        _step(policy)
    return policy


@pytest.mark.parametrize("capacity", CAPACITIES)
def test_a_jump_while_the_head_misses_equals_its_steps(capacity: str) -> None:
    stepped, jumped = _warmed(capacity), _warmed(capacity)
    head = stepped.requests[f"{capacity}/head"]
    reuse_before = head.estimated_reusable_tokens
    for i in range(K):
        if i == 2:  # arrives at the third poll; the schedule after it activates it
            stepped.add_request(make_request(f"{capacity}/late", 32, 8))
        _step(stepped)
    assert head.estimated_reusable_tokens < reuse_before  # the stretch evicted a stored block
    assert [r.request_id for r in stepped.active][-1] == f"{capacity}/late"

    ff = jumped.fast_forward()
    reqs = ff.steady_running(1)
    assert reqs is not None and [r.request_id for r in reqs] == [f"{capacity}/gen"]
    assert ff.arrivals_wait(32)
    assert ff.horizon(reqs, K) == K
    ff.advance(reqs, K, [[TOKEN] * K])
    jumped.add_request(make_request(f"{capacity}/late", 32, 8))
    ff.end_stretch()
    assert policy_state(jumped) == policy_state(stepped)


def test_a_missed_context_ahead_of_a_generation_is_no_stretch_under_max_utilization() -> None:
    """Max-utilization pauses a started request behind a context that misses, so a generation
    after the head in the active set ends the steady state."""
    stepped, certified = _warmed("max-utilization"), _warmed("max-utilization")
    for policy in (stepped, certified):
        policy.active.reverse()  # head first, then gen
    assert certified.fast_forward().steady_running(1) is None
    assert stepped.schedule().paused_req_ids == ["max-utilization/gen"]


def test_a_generation_only_request_the_next_schedule_activates_is_no_stretch() -> None:
    """Guaranteed-no-evict looks at DISAGG_GENERATION_INIT requests before the pending contexts."""
    stepped, certified = _warmed("guaranteed-no-evict"), _warmed("guaranteed-no-evict")
    for policy in (stepped, certified):
        req = make_request("remote", 16, 4, kv_transfer_params=KVTransferParams(do_remote_prefill=True))
        req.output_token_ids.append(TOKEN)  # the context phase's token
        policy.add_request(req)
    assert certified.fast_forward().steady_running(1) is None
    assert "remote" in stepped.schedule().kv_reqs_to_recv
