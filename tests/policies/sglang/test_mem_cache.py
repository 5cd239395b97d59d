"""SGLang's KV memory path (policies/sglang/mem_cache.py): what a checkpoint inserts, shares and
frees, where a lock moves, what a release keeps, and the page over-estimates of the allocations."""

from __future__ import annotations

import pytest
from schedsim.policies import Request
from schedsim.policies.kv_cache import KVCacheManager
from schedsim.policies.sglang.mem_cache import MemCache, radix_key

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree


def _mem(blocks: int = 64, page: int = 1) -> MemCache:
    kv = KVCacheManager(blocks + 1, page, 4096, enable_caching=False)
    return MemCache(kv, page, enable_radix_cache=True)


def _computed(mem: MemCache, rid: str, prompt: list[int], outputs: list[int], computed: int) -> Request:
    """A request whose row holds `computed` tokens (no prefix hit)."""
    req = Request(rid, 0.0, len(prompt), 100, prompt_token_ids=list(prompt))
    req.output_token_ids.extend(outputs)
    assert mem.kv.allocate_slots(req, computed, has_scheduled_reqs=False) is not None
    req.num_computed_tokens = computed
    mem.info(req)
    return req


def test_a_checkpoint_with_outputs_splits_at_the_prompt_so_outputs_evict_first():
    """A request resumed after retraction inserts prompt and recomputed outputs at once: the leaf
    is split at the prompt boundary, so a small eviction takes the outputs and keeps the prompt."""
    mem = _mem()
    tree = mem.tree_cache
    prompt, outs = list(range(1, 11)), list(range(101, 106))
    req = _computed(mem, "r", prompt, outs, 15)
    mem.checkpoint_kv_cache(req, 15)
    prompt_node = tree.root.children[1]
    assert prompt_node.key == prompt and list(prompt_node.children.values())[0].key == outs
    mem.release_kv_cache(req, checkpoint=False)
    assert tree.evictable_size() == 15
    tree.evict(1)
    assert tree.evictable_size() == 10 and tree.root.children[1] is prompt_node and not prompt_node.children


def test_a_checkpoint_shares_the_trees_blocks_and_frees_the_duplicates():
    """Two requests computed the same 10-token prompt in one batch: the first inserts its blocks;
    the second's own copies are freed and its row points at the tree's; locks move to the node
    the insert ended on."""
    mem = _mem()
    prompt = list(range(1, 11))
    a = _computed(mem, "a", prompt, [], 10)
    b = _computed(mem, "b", prompt + [99], [], 11)
    free = mem.kv.num_free_blocks
    mem.checkpoint_kv_cache(a, 10)
    mem.checkpoint_kv_cache(b, 11)
    row_a, row_b = mem.kv.req_to_blocks["a"], mem.kv.req_to_blocks["b"]
    assert row_b[:10] == row_a[:10] and mem.kv.num_free_blocks == free + 10
    assert mem.req_kv["b"].cache_protected_len == 11 and mem.req_kv["b"].lock.key == [99]
    assert mem.tree_cache.protected_size() == 11 and mem.tree_cache.evictable_size() == 0
    mem.check_invariants()
    mem.release_kv_cache(a, checkpoint=False)
    mem.release_kv_cache(b, checkpoint=False)
    assert mem.tree_cache.evictable_size() == 11 and mem.kv.num_free_blocks == 64 - 11
    mem.check_invariants()


def test_a_finish_inserts_prompt_and_outputs_it_computed():
    """A length finish computed prompt + max_new - 1 tokens: that much is inserted, the row freed."""
    mem = _mem()
    req = _computed(mem, "r", list(range(1, 9)), [101, 102, 103], 10)  # the last output not computed
    mem.release_kv_cache(req, checkpoint=True)
    assert mem.tree_cache.evictable_size() == 10 and "r" not in mem.kv.req_to_blocks
    assert mem.kv.num_free_blocks == 64 - 10
    mem.check_invariants()


def test_page_keys_floor_to_whole_pages():
    """At page 4 a key has one unit per full page: 10 and 9 tokens give the same two units."""
    req = Request("r", 0.0, 10, 5, prompt_token_ids=list(range(10)))
    same = Request("s", 0.0, 10, 5, prompt_token_ids=list(range(10)))
    assert len(radix_key(req, 10, 4)) == 2
    assert radix_key(req, 10, 4) == radix_key(same, 9, 4)


def test_a_decode_evicts_for_a_page_per_request_even_when_none_needs_one():
    """Page 4: the decode check asks only for the pages requests need (none here), but the
    decode allocation makes one page per request free first (SGLang's over-estimate), evicting
    the whole cached leaf for it."""
    mem = _mem(blocks=10, page=4)
    cached = _computed(mem, "c", list(range(100, 132)), [], 32)  # 8 pages, then left in the tree
    mem.checkpoint_kv_cache(cached, 32)
    mem.release_kv_cache(cached, checkpoint=False)
    assert (mem.available_size(), mem.evictable_size()) == (8, 32)
    req = _computed(mem, "r", list(range(5)), [], 5)  # the last 2 pages; its next token fits
    assert mem.available_size() == 0 and mem.new_tokens_required_next_decode([req]) == 0
    assert mem.check_decode_mem([req]) and mem.evictable_size() == 32  # the check evicts nothing
    mem.alloc_for_decode([req])
    assert (mem.available_size(), mem.evictable_size()) == (32, 0)
    assert len(mem.kv.req_to_blocks["r"]) == 2


def test_a_key_that_is_the_requests_own_hash_list_is_copied_into_the_tree():
    """At page 4 a request's key is its block hashes, handed over uncopied where they are exactly
    the pages asked: the tree keeps its own copy, so the hashes the request adds later leave the
    tree's key as inserted."""
    mem = _mem(blocks=16, page=4)
    req = Request("r", 0.0, 8, 100)  # no token ids: one content hash per page
    assert mem.kv.allocate_slots(req, 8, has_scheduled_reqs=False) is not None
    req.num_computed_tokens = 8
    mem.info(req)
    key = radix_key(req, 8, 4)
    assert key is req.block_hashes and len(key) == 2
    mem.checkpoint_kv_cache(req, 8)
    node = mem.req_kv["r"].lock
    assert node is not None and node.key == key and node.key is not key
    req.output_token_ids.extend([5, 6, 7, 8])  # a third page of known tokens
    assert len(radix_key(req, 12, 4)) == 3 and len(radix_key(req, 8, 4)) == 2
    assert node.key == key[:2] and len(node.key) == 2
    mem.check_invariants()
