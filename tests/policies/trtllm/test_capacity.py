"""Scenario tests for the capacity scheduler (level 1): exact (fitting, paused) for each policy."""

from __future__ import annotations

import pytest
from schedsim.policies.trtllm import CapacityScheduler, CapacitySchedulerPolicy, PeftBudget
from support.trtllm import ctx, gen, hold, ids, make_acct

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree

NO_EVICT = CapacitySchedulerPolicy.GUARANTEED_NO_EVICT
MAX_UTIL = CapacitySchedulerPolicy.MAX_UTILIZATION
STATIC = CapacitySchedulerPolicy.STATIC_BATCH


def capacity(policy, acct, max_requests: int = 8, **kw) -> CapacityScheduler:
    return CapacityScheduler(policy, max_requests, acct, **kw)


def test_max_requests_caps_the_count_and_ignores_kv():
    active = [ctx("A", 4000), gen("B"), ctx("C", 10)]
    res = CapacityScheduler(CapacitySchedulerPolicy.MAX_REQUESTS, 2, None).schedule(active)
    assert ids(res.fitting) == ["A", "B"] and res.paused == []


def test_no_kv_accounting_falls_back_to_max_requests():
    sched = CapacityScheduler(MAX_UTIL, 2, None)
    assert sched.policy is CapacitySchedulerPolicy.MAX_REQUESTS


def _no_evict_pool():
    kv = make_acct(11)
    g = hold(kv, gen("G", prompt=16, generated=1, max_new=48))  # holds 1, needs 4 - 1 = 3 more
    assert kv.kv.num_free_blocks == 10
    return kv, g


def test_no_evict_reserves_to_completion_and_admits_in_order():
    kv, g = _no_evict_pool()
    x = ctx("X", 64, max_new=32)  # ceil(96 / 16) = 6 blocks
    y = ctx("Y", 10, max_new=6)  # 1 block
    res = capacity(NO_EVICT, kv).schedule([g, x, y])
    assert ids(res.fitting) == ["G", "X", "Y"] and res.paused == []


def test_no_evict_breaks_at_the_first_context_that_does_not_fit():
    kv, g = _no_evict_pool()
    x = ctx("X", 64, max_new=32)
    y2 = ctx("Y", 10, max_new=7)  # 2 blocks, only 1 left
    z = ctx("Z", 1, max_new=1)  # would fit, but the queue is blocked at Y
    assert ids(capacity(NO_EVICT, kv).schedule([g, x, y2, z]).fitting) == ["G", "X"]


def test_no_evict_head_of_line_blocks_small_requests_behind_a_big_one():
    kv, g = _no_evict_pool()
    big, small = ctx("X", 300, max_new=20), ctx("Y", 10, max_new=6)  # 20 blocks, 1 block
    assert ids(capacity(NO_EVICT, kv).schedule([g, big, small]).fitting) == ["G"]


def test_no_evict_skips_instead_of_breaking_when_only_peft_pages_are_short():
    kv, g = _no_evict_pool()
    x = ctx("X", 10, max_new=6, lora=1)
    y = ctx("Y", 10, max_new=6)
    res = capacity(NO_EVICT, kv, peft=PeftBudget(max_pages=1, pages_per_adapter=2)).schedule([g, x, y])
    assert ids(res.fitting) == ["G", "Y"]


def test_peft_pages_are_claimed_once_per_adapter():
    kv = make_acct(20)
    a, b, c = ctx("A", 10, lora=1), ctx("B", 10, lora=1), ctx("C", 10, lora=2)
    res = capacity(NO_EVICT, kv, peft=PeftBudget(max_pages=2, pages_per_adapter=2)).schedule([a, b, c])
    assert ids(res.fitting) == ["A", "B"]


def test_static_batch_admits_only_into_an_empty_batch():
    kv, g = _no_evict_pool()
    y = ctx("Y", 10, max_new=6)
    assert ids(capacity(STATIC, kv).schedule([g, y]).fitting) == ["G"]
    assert ids(capacity(STATIC, make_acct(11)).schedule([ctx("Y", 10, max_new=6)]).fitting) == ["Y"]


def test_capacity_respects_max_num_requests_for_running_generations():
    kv = make_acct(20)
    gens = [hold(kv, gen(f"g{i}", prompt=10)) for i in range(3)]
    assert ids(capacity(NO_EVICT, kv, max_requests=2).schedule(gens).fitting) == ["g0", "g1"]


def _three_generations(usable: int):
    """G1 needs 0 blocks next step, G2 and G3 need 1 each; each holds 1 block."""
    kv = make_acct(usable)
    g1 = hold(kv, gen("G1", prompt=10))
    g2 = hold(kv, gen("G2", prompt=16))
    g3 = hold(kv, gen("G3", prompt=16))
    return kv, g1, g2, g3


def test_max_utilization_pauses_the_current_request_itself():
    kv, g1, g2, g3 = _three_generations(4)  # one free block: G2 takes it, G3 misses
    res = capacity(MAX_UTIL, kv).schedule([g1, g2, g3])
    assert ids(res.fitting) == ["G1", "G2"] and ids(res.paused) == ["G3"]


def test_max_utilization_pauses_the_last_started_request_and_retries():
    kv, g1, g2, g3 = _three_generations(3)  # no free block: G2 misses, G3 (after it) is paused
    res = capacity(MAX_UTIL, kv).schedule([g1, g2, g3])
    assert ids(res.fitting) == ["G1", "G2"] and ids(res.paused) == ["G3"]


def test_max_utilization_skips_unstarted_requests_when_choosing_a_victim():
    kv, g1, g2, g3 = _three_generations(3)
    x = ctx("X", 16)  # a first-chunk context: pausing it frees nothing
    res = capacity(MAX_UTIL, kv).schedule([g1, g2, g3, x])
    assert ids(res.paused) == ["G3"] and ids(res.fitting) == ["G1", "G2"]


def test_max_utilization_breaks_when_nothing_started_is_left():
    kv = make_acct(2)
    g1 = hold(kv, gen("G1", prompt=10))
    x, y = ctx("X", 40), ctx("Y", 5)  # X needs 3 blocks, only 1 free; nothing started after X
    res = capacity(MAX_UTIL, kv).schedule([g1, x, y])
    assert ids(res.fitting) == ["G1"] and res.paused == []


def test_max_utilization_pauses_a_mid_chunk_context():
    kv = make_acct(4)
    g1 = hold(kv, gen("G1", prompt=16))  # needs 1 block
    c = hold(kv, ctx("C", 48, pos=16))  # started context holding its whole prompt: 3 blocks
    res = capacity(MAX_UTIL, kv).schedule([g1, c])
    assert ids(res.fitting) == ["G1"] and ids(res.paused) == ["C"]


def test_two_step_look_ahead_block_counts():
    kv = make_acct(8)
    g = hold(kv, gen("G", prompt=30, generated=2))  # 31 computed tokens, 2 blocks
    assert kv.needed_blocks_one_step(g, two_steps=False) == 0  # 31 -> 32
    assert kv.needed_blocks_one_step(g, two_steps=True) == 1  # 31 -> 33
    capped = hold(kv, gen("H", prompt=30, generated=2, max_new=2))  # one token left to add
    assert kv.needed_blocks_one_step(capped, two_steps=True) == 0


def test_no_evict_started_context_waits_in_the_second_pass_behind_a_head_of_line_miss():
    """Cause 1: the first pass takes only generations; a started context queues with the new ones."""
    acct = make_acct(12)
    big = ctx("B", 40, max_new=100)  # 9 blocks to completion, 8 free
    a = hold(acct, ctx("A", 64, pos=16, max_new=16))  # started: holds its 4 prompt blocks, needs 1 more
    assert ids(capacity(NO_EVICT, acct).schedule([big, a]).fitting) == []
    opted = capacity(NO_EVICT, acct, started_contexts_in_first_pass=True).schedule([big, a])
    assert ids(opted.fitting) == ["A"]


def test_static_batch_started_context_waits_while_a_generation_runs():
    acct = make_acct(20)
    g = hold(acct, gen("G", prompt=16))
    a = hold(acct, ctx("A", 64, pos=16))
    assert ids(capacity(STATIC, acct).schedule([g, a]).fitting) == ["G"]
    opted = capacity(STATIC, acct, started_contexts_in_first_pass=True).schedule([g, a])
    assert ids(opted.fitting) == ["G", "A"]
