"""Prefix-aware skipping: one walk serves skip test and block estimate; registration only on admission;
a context's blocks become reusable only once its whole prompt is computed."""

from __future__ import annotations

import pytest
from schedsim.policies import make_policy
from schedsim.policies.trtllm import CapacityScheduler, CapacitySchedulerPolicy, PeftBudget
from support.trtllm import ctx, gen, hold, ids, make_acct
from support.trtllm_driver import make_request, oracle

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree

SHARED = (11, 12, 13, 14)


def _policy(name: str = "trtllm:guaranteed-no-evict", **kw):
    return make_policy(
        name, num_gpu_blocks=64, block_size=16, max_model_len=512, max_num_batched_tokens=512, **kw
    )


def _step(policy):
    plan = policy.schedule()
    policy.update_from_output(plan, oracle(policy, plan))
    policy.check_invariants()
    return plan


def test_second_request_sharing_an_uncached_block_waits_one_step_then_reuses():
    policy = _policy()
    policy.add_request(make_request("A", 64, 4, hashes=SHARED))
    policy.add_request(make_request("B", 64, 4, hashes=SHARED))
    first = _step(policy)
    assert list(first.num_scheduled_tokens) == ["A"] and policy.stats.num_prefix_skips == 1
    second = _step(policy)
    # 63 tokens reused: three full blocks, and 15 tokens of A's last block copied (partial reuse)
    assert second.num_scheduled_tokens["B"] == 1
    assert second.context_lens["B"] == 63


def test_without_prefix_awareness_both_run_and_neither_reuses():
    policy = _policy(enable_prefix_aware_scheduling=False)
    policy.add_request(make_request("A2", 64, 4, hashes=SHARED))
    policy.add_request(make_request("B2", 64, 4, hashes=SHARED))
    plan = _step(policy)
    assert plan.num_scheduled_tokens == {"A2": 64, "B2": 64}


def test_variable_window_attention_disables_skipping():
    policy = _policy(variable_window_attention=True)
    policy.add_request(make_request("A3", 64, 4, hashes=SHARED))
    policy.add_request(make_request("B3", 64, 4, hashes=SHARED))
    assert _step(policy).num_scheduled_tokens == {"A3": 64, "B3": 64}


def test_mid_chunk_context_pre_registers_its_first_new_block_even_later_in_the_list():
    acct = make_acct(20)
    a = hold(acct, ctx("A", 64, pos=16, hashes=SHARED))  # started: nothing stored until its prompt completes
    b = ctx("B", 64, hashes=SHARED)
    sched = CapacityScheduler(CapacitySchedulerPolicy.GUARANTEED_NO_EVICT, 8, acct)
    res = sched.schedule([b, a])
    assert ids(res.fitting) == ["A"] and res.num_prefix_skipped == 1
    assert b.estimated_reusable_tokens == 0  # A's blocks are not stored yet: nothing to reuse


def test_rejected_contributor_does_not_make_duplicates_wait():
    kv = make_acct(20)
    a = ctx("A", 64, hashes=SHARED, lora=1)  # its adapter pages do not fit: skipped, not admitted
    b = ctx("B", 64, hashes=SHARED)
    sched = CapacityScheduler(
        CapacitySchedulerPolicy.GUARANTEED_NO_EVICT, 8, kv, peft=PeftBudget(max_pages=0, pages_per_adapter=1)
    )
    assert ids(sched.schedule([a, b]).fitting) == ["B"]


def test_retry_after_pause_does_not_skip_itself():
    kv = make_acct(5)
    x = ctx("X", 64, hashes=SHARED)  # 4 blocks, 1 free: fits only once G is paused
    g = hold(kv, gen("G", prompt=40, generated=10))  # 49 computed tokens, 4 blocks
    res = CapacityScheduler(CapacitySchedulerPolicy.MAX_UTILIZATION, 8, kv).schedule([x, g])
    assert ids(res.paused) == ["G"] and ids(res.fitting) == ["X"]


def test_shared_hit_blocks_cost_no_free_block_in_the_estimate():
    acct = make_acct(20)
    hold(acct, ctx("A", 32, hashes=SHARED[:2]), store=True)  # a completed prompt: 2 blocks stored, held
    b = ctx("B", 64, hashes=SHARED)
    summary = acct.analyze_prefix_reuse(b)
    assert (summary.reusable_blocks_all, summary.reusable_blocks_allocated) == (2, 2)
    assert acct.needed_blocks_one_step(b, False, summary) == 4 - 2
    assert b.estimated_reusable_tokens == 32
    assert acct.remaining_blocks_to_completion(b, summary) == 5 - 2  # ceil((64 + 16) / 16) = 5


def test_stored_blocks_nobody_holds_credit_tokens_but_not_blocks():
    acct = make_acct(20)
    a = hold(acct, ctx("A", 32, hashes=SHARED[:2]), store=True)
    acct.kv.remove_sequence(a.request_id, None)  # released: stored, free, still reusable
    b = ctx("B", 64, hashes=SHARED)
    assert acct.needed_blocks_one_step(b, False) == 4  # reusing a free block still takes it from the queue
    assert b.estimated_reusable_tokens == 32
