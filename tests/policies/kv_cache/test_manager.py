"""Unit tests of the KV block manager: null block, prefix hits, LRU eviction order, fenced frees."""

from __future__ import annotations

import pytest
from schedsim.policies import Request, RequestStatus
from schedsim.policies.kv_cache import BlockPool, KVCacheManager, ensure_block_hashes

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree


def req(
    rid: str,
    tokens: list[int] | None = None,
    prompt_len: int | None = None,
    hashes: tuple[int, ...] | None = None,
    max_tokens: int = 8,
) -> Request:
    n = len(tokens) if tokens is not None else prompt_len
    return Request(rid, 0.0, n, max_tokens, prompt_token_ids=tokens, prompt_block_hashes=hashes)


def test_null_block_never_allocated_and_usable_count():
    pool = BlockPool(5, enable_caching=True)
    assert pool.num_free_blocks == 4
    got = pool.get_new_blocks(4)
    assert 0 not in got and sorted(got) == [1, 2, 3, 4]
    with pytest.raises(ValueError):
        pool.get_new_blocks(1)


def test_free_order_unhashed_front_hashed_back():
    pool = BlockPool(6, enable_caching=True)
    a, b, c = pool.get_new_blocks(3)  # 1, 2, 3; free queue now [4, 5]
    pool.cache_block(a, 111)
    pool.free_blocks([c, b, a])  # reverse order as a request frees
    # unhashed c, b prepended in that order; hashed a appended
    assert list(pool.free_queue) == [c, b, 4, 5, a]
    assert pool.get_cached_block(111) == a
    got = pool.get_new_blocks(5)
    assert got[-1] == a and pool.get_cached_block(111) is None  # evicted only when reused


def test_prefix_hit_capped_below_num_tokens_and_full_blocks_only():
    kv = KVCacheManager(20, 4, 64)
    r1 = req("a", list(range(10)))
    assert kv.allocate_slots(r1, 10) is not None
    r1.num_computed_tokens = 10
    kv.cache_blocks(r1, 10)
    r2 = req("b", list(range(10)) + [99])
    hit, n = kv.get_computed_blocks(r2)
    assert n == 8 and hit == kv.get_block_ids("a")[:2]
    r3 = req("c", list(range(8)))  # exactly two blocks: cap at 7 tokens -> one block
    hit3, n3 = kv.get_computed_blocks(r3)
    assert n3 == 4 and len(hit3) == 1


def test_allocate_fails_without_side_effects_and_full_sequence_gate():
    kv = KVCacheManager(5, 4, 64)  # 4 usable blocks
    r = req("a", list(range(20)))
    assert kv.allocate_slots(r, 4, full_sequence_must_fit=True) is None  # 5 blocks needed
    assert kv.num_free_blocks == 4 and kv.get_block_ids("a") == []
    assert kv.allocate_slots(r, 4) == [1]
    kv.check_invariants()


def test_shared_blocks_ref_counts_and_conservation():
    kv = KVCacheManager(10, 4, 64)
    a, b = req("a", [1] * 9), req("b", [1] * 9)
    kv.allocate_slots(a, 9)
    hit, n = kv.get_computed_blocks(b)
    assert n == 8
    b.status = RequestStatus.WAITING
    kv.allocate_slots(b, 1, num_new_computed_tokens=n, new_computed_blocks=hit)
    assert kv.get_block_ids("b")[:2] == kv.get_block_ids("a")[:2]
    assert kv.pool.ref_cnt[hit[0]] == 2
    kv.check_invariants()
    kv.free(a)
    kv.free(b)
    kv.check_invariants()
    assert kv.num_free_blocks == 9


def test_deferred_free_waits_for_fence():
    kv = KVCacheManager(10, 4, 64)
    r = req("a", [3] * 8)
    kv.allocate_slots(r, 8)
    s0 = kv.begin_step()
    kv.begin_step()  # a later step is in flight
    kv.free(r, last_sched_seq=s0)
    assert kv.num_free_blocks == 7 and kv.num_deferred_blocks == 2
    kv.check_invariants()
    kv.end_step()  # step s0 done, but the fence is the newest scheduled step
    assert kv.num_free_blocks == 7
    kv.end_step()
    assert kv.num_free_blocks == 9 and kv.num_deferred_blocks == 0
    kv.check_invariants()


def test_hashes_for_simulated_requests():
    bs = 4
    a = req("a", prompt_len=12, hashes=(7, 8))
    b = req("b", prompt_len=12, hashes=(7, 8))
    c = req("c", prompt_len=12, hashes=(7, 9))
    ha, hb, hc = (ensure_block_hashes(x, 3, bs) for x in (a, b, c))
    assert ha[:2] == hb[:2] and ha[0] == hc[0] and ha[1] != hc[1]
    assert ha[2] != hb[2]  # block without a given hash is unique to its request
    t = req("t", list(range(12)))
    t.output_token_ids.extend([5, 6, 7, 8])
    assert len(ensure_block_hashes(t, 10, bs)) == 4  # only full known blocks


def test_blocks_past_private_from_are_named_by_request_and_index():
    """From the first block only its request knows, outputs included, every name is the request's
    own and depends on nothing else: equal outputs elsewhere share nothing, a recomputation (the
    hashes rebuilt from scratch, in pieces) names its blocks alike; a prompt whose given hashes
    cover it whole chains its outputs by content."""
    bs = 4
    a = req("a", prompt_len=10, hashes=(7, 8))  # block 2 straddles prompt and outputs: private
    b = req("b", prompt_len=10, hashes=(7, 8))
    for r in (a, b):
        r.output_token_ids.extend([1, 2, 3, 4, 5, 6])  # the same outputs
    ha, hb = ensure_block_hashes(a, 4, bs), ensure_block_hashes(b, 4, bs)
    assert ha[:2] == hb[:2] and not set(ha[2:]) & set(hb[2:])
    again = req("a", prompt_len=10, hashes=(7, 8))
    again.output_token_ids.extend([1, 2, 3, 4, 5, 6])
    ensure_block_hashes(again, 1, bs)
    assert ensure_block_hashes(again, 4, bs) == ha
    whole = [req(x, prompt_len=8, hashes=(7, 8)) for x in ("w1", "w2")]
    for r in whole:
        r.output_token_ids.extend([1, 2, 3, 4])
    h1, h2 = (ensure_block_hashes(r, 3, bs) for r in whole)
    assert h1 == h2  # shared prompt, equal outputs: the same prefix


def test_simulated_requests_share_prefix_through_the_policy():
    from schedsim.policies import StepResult, make_policy

    p = make_policy("vllm", block_size=4, num_gpu_blocks=64, max_model_len=64)
    p.add_request(req("a", prompt_len=14, hashes=(5, 6, 7)))
    plan = p.schedule()
    p.update_from_output(plan, StepResult(sampled_token_ids={"a": [9]}))
    p.add_request(req("b", prompt_len=13, hashes=(5, 6, 8)))
    p.add_request(req("c", prompt_len=10))
    plan = p.schedule()
    assert plan.context_lens == {"a": 14, "b": 8, "c": 0}
    assert plan.block_ids["b"][:2] == plan.block_ids["a"][:2]
    p.check_invariants()


def test_fits_counts_a_cut_hit_and_its_unreferenced_blocks():
    """fits at a cut of the prefix hit (the fast-forward's head certificate) asks what
    allocate_slots would ask of that shorter hit: new blocks, plus the hit blocks that leave the
    free queue."""
    kv = KVCacheManager(20, 4, 64)  # 19 usable blocks
    a = req("a", list(range(16)))
    assert kv.allocate_slots(a, 16) is not None
    a.num_computed_tokens = 16
    kv.cache_blocks(a, 16)
    kv.free(a)  # its four blocks stay cached, unreferenced, at the back of the free queue
    b = req("b", list(range(16)) + [99] * 8)  # 24 tokens, six blocks; hit: a's first four
    hit, _ = kv.get_computed_blocks(b)
    assert len(hit) == 4 and kv.num_evictable(hit) == 4
    free = kv.num_free_blocks
    assert free == 19
    # whole hit: 6 - 4 new blocks + 4 leaving the free queue = 6; cut after 1: 5 + 1 = 6
    for j in (4, 1, 0):
        assert kv.fits(b, 24, j, kv.num_evictable(hit[:j]), False, False, 6)
        assert not kv.fits(b, 24, j, kv.num_evictable(hit[:j]), False, False, 5)
    c = req("c", list(range(16)) + [7] * 8)
    assert kv.allocate_slots(c, 8, 16, hit) is not None  # c now references the hit blocks
    assert kv.num_evictable(hit) == 0
    assert kv.fits(b, 24, 4, 0, False, False, 2) and not kv.fits(b, 24, 4, 0, False, False, 1)
    assert kv.num_free_blocks == free - 6
