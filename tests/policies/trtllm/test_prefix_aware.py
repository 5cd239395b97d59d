"""Prefix-aware skipping: one walk serves skip test and block estimate; registration only on admission."""

from __future__ import annotations

import pytest
from schedsim.policies import make_policy
from schedsim.policies.trtllm import CapacityScheduler, CapacitySchedulerPolicy, KvAccounting, PeftBudget
from support.trtllm import ctx, gen, hold, ids, make_kv
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
    assert second.num_scheduled_tokens["B"] == 16  # 48 tokens reused (capped below the prompt)
    assert second.context_lens["B"] == 48


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


def _mid_chunk(kv, rid: str, prompt: int, computed: int):
    """A started context that has published only its first `computed` tokens."""
    req = ctx(rid, prompt, pos=computed, hashes=SHARED)
    req.request.num_computed_tokens = 0
    assert kv.allocate_slots(req.request, computed, num_lookahead_tokens=prompt - computed) is not None
    req.request.num_computed_tokens = computed
    return req


def test_mid_chunk_context_pre_registers_its_next_block_even_later_in_the_list():
    kv = make_kv(20)
    a = _mid_chunk(kv, "A", 64, 16)
    b = ctx("B", 64, hashes=SHARED)
    sched = CapacityScheduler(CapacitySchedulerPolicy.GUARANTEED_NO_EVICT, 8, KvAccounting(kv))
    res = sched.schedule([b, a])
    assert ids(res.fitting) == ["A"] and res.num_prefix_skipped == 1
    assert b.estimated_reusable_tokens == 16  # the same walk gave the reuse estimate


def test_rejected_contributor_does_not_make_duplicates_wait():
    kv = make_kv(20)
    a = ctx("A", 64, hashes=SHARED, lora=1)  # its adapter pages do not fit: skipped, not admitted
    b = ctx("B", 64, hashes=SHARED)
    sched = CapacityScheduler(
        CapacitySchedulerPolicy.GUARANTEED_NO_EVICT,
        8,
        KvAccounting(kv),
        peft=PeftBudget(max_pages=0, pages_per_adapter=1),
    )
    assert ids(sched.schedule([a, b]).fitting) == ["B"]


def test_retry_after_pause_does_not_skip_itself():
    kv = make_kv(5)
    x = ctx("X", 64, hashes=SHARED)  # 4 blocks, 1 free: fits only once G is paused
    g = hold(kv, gen("G", prompt=40, generated=10))  # 49 computed tokens, 4 blocks
    res = CapacityScheduler(CapacitySchedulerPolicy.MAX_UTILIZATION, 8, KvAccounting(kv)).schedule([x, g])
    assert ids(res.paused) == ["G"] and ids(res.fitting) == ["X"]


def test_shared_hit_blocks_cost_no_free_block_in_the_estimate():
    kv = make_kv(20)
    _mid_chunk(kv, "A", 64, 32)  # blocks 0-1 cached and held by A
    b = ctx("B", 64, hashes=SHARED)
    acct = KvAccounting(kv)
    summary = acct.analyze_prefix_reuse(b)
    assert summary.reusable_tokens == 32 and summary.num_shared_hit_blocks == 2
    assert acct.needed_blocks_one_step(b, False, summary) == 2
    assert acct.remaining_blocks_to_completion(b, summary) == 5 - 2  # ceil((64 + 16) / 16) = 5
