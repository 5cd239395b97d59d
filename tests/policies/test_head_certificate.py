"""The queue head's certificate (`FastForwardBase._head_blocked`): a stretch may run while requests
wait only if the head gets no blocks in any of its schedules. Two ways its prefix hit can change
inside a stretch are pinned here on a hand-built pool: a hit block in the free queue evicted by a
decode's allocation (the hit is cut there, and a budget-bound chunk then needs fewer blocks), and
a running request publishing the block that extends the hit."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from schedsim.policies import Request
from schedsim.policies.fastforward import FastForwardBase, HeadDemand
from schedsim.policies.kv_cache import KVCacheManager

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree

BS = 4  # tokens a block


def _running(kv: KVCacheManager, rid: str, tokens: list[int]) -> Request:
    """A request holding blocks for its prompt, its full blocks published."""
    r = Request(rid, 0.0, len(tokens), 8, prompt_token_ids=tokens)
    assert kv.allocate_slots(r, len(tokens)) is not None
    r.num_computed_tokens = len(tokens)
    kv.cache_blocks(r, len(tokens))
    return r


def _pool() -> tuple[FastForwardBase, Request]:
    """11 usable blocks: a finished request's four published blocks (tokens 0-15) back in the free
    queue, a running request holding five, one fresh block free: five free in all."""
    kv = KVCacheManager(12, BS, 64)
    done = _running(kv, "done", list(range(16)))
    kv.free(done)
    running = _running(kv, "run", list(range(1000, 1020)))  # five blocks
    assert kv.num_free_blocks == 6
    policy = SimpleNamespace(config=SimpleNamespace(max_model_len=64), kv=kv, max_concurrent_batches=1)
    ff = FastForwardBase(policy)
    kv.allocate_slots(Request("pad", 0.0, 3, 8, prompt_token_ids=[7, 7, 7]), 3)  # the fresh block
    assert kv.num_free_blocks == 5
    return ff, running


def test_a_hit_cut_by_an_eviction_may_admit_a_budget_bound_head() -> None:
    """The head hits the four free-queue blocks; a chunk of 8 tokens after them needs those four
    plus two (6 > 5 free). Evicting the first hit block leaves a chunk of 8 tokens from the start:
    two blocks, which fit. So the head is not blocked."""
    ff, running = _pool()
    head = Request("head", 0.0, 40, 8, prompt_token_ids=list(range(16)) + list(range(500, 524)))
    hit, _ = ff.kv.get_computed_blocks(head)
    assert len(hit) == 4
    assert not ff._head_blocked(head, [running], HeadDemand(8, 8, chunked=True))
    # the whole prompt (no chunk) needs ten blocks at any cut: blocked
    assert ff._head_blocked(head, [running], HeadDemand(64, 64, chunked=False))


def test_a_running_request_that_may_publish_the_next_block_keeps_the_head_unblocked() -> None:
    """A head with no hit and a ten-block prompt is blocked, unless a running request has not yet
    published its first block: that block could be the head's first (prompt tokens are known)."""
    ff, running = _pool()
    head = Request("head", 0.0, 40, 8, prompt_token_ids=list(range(600, 640)))
    demand = HeadDemand(64, 64, chunked=False)
    assert ff._head_blocked(head, [running], demand)
    fresh = ff.kv.get_block_ids("pad")  # "pad" holds one block, none of it published
    assert fresh and ff.kv.num_cached_block.get("pad", 0) == 0
    pad = Request("pad", 0.0, 3, 8, prompt_token_ids=[7, 7, 7])
    assert not ff._head_blocked(head, [running, pad], demand)
