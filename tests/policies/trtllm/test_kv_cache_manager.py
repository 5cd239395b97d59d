"""TensorRT-LLM's block manager: one block per key, subtree eviction, partial reuse, store and release
order; block keys for requests with token ids, trace hashes or only a length; a property test."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schedsim.policies import Request
from schedsim.policies.trtllm import BlockKeys, KVCacheManager
from schedsim.policies.trtllm.block_keys import STAND_IN_BASE, key_tokens

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree


BS = 4


def toks(*values: int) -> tuple[int, ...]:
    """A block key."""
    return tuple(values)


def manager(blocks: int = 8) -> KVCacheManager:
    """A small pool, block size 4, reuse on."""
    return KVCacheManager(blocks, BS, 64)


def test_fresh_blocks_come_from_the_front_and_release_goes_last_first_to_the_back():
    kv = manager(4)
    assert kv.add_sequence("a", 6, [toks(1, 2, 3, 4), toks(5)]) == 0
    assert kv.get_block_ids("a") == [1, 2] and kv.free_queue.block_ids() == [3, 4]
    kv.remove_sequence("a", None)
    assert kv.free_queue.block_ids() == [3, 4, 2, 1]
    kv.check_invariants()


def test_stored_prefix_is_reused_and_the_partial_last_block_matched_exactly():
    kv = manager()
    keys = [toks(1, 2, 3, 4), toks(5, 6, 7)]
    kv.add_sequence("a", 8, keys)
    kv.remove_sequence("a", keys)  # stores the full block and the partial one (3 tokens)
    assert kv.tree.num_stored_blocks() == 2
    assert kv.add_sequence("b", 8, keys) == 7  # an exact match of the stored partial block
    assert kv.get_block_ids("b") == [1, 2]  # both taken back: the partial leaf is taken over
    kv.check_invariants()


def test_partial_match_of_a_held_block_is_copied_into_a_fresh_block():
    kv = manager()
    kv.add_sequence("a", 9, [toks(1, 2, 3, 4), toks(5, 6, 7, 8)])
    kv.store_blocks("a", [toks(1, 2, 3, 4), toks(5, 6, 7, 8)])
    reused = kv.add_sequence("b", 9, [toks(1, 2, 3, 4), toks(5, 6, 9, 9)])
    # block 2 is a's: its 2 matching tokens are copied into 4; 5 holds b's ninth token
    assert reused == 6 and kv.get_block_ids("b") == [1, 4, 5]
    assert kv.drain_copies() == [(2, 4)] and kv.drain_copies() == []
    kv.check_invariants()


def test_one_block_per_key_and_eviction_takes_the_subtree():
    kv = manager(6)
    keys = [toks(1, 2, 3, 4), toks(5, 6, 7, 8)]
    kv.add_sequence("a", 9, keys)
    kv.add_sequence("b", 9, [])  # the same tokens, computed separately: plain blocks
    assert kv.store_blocks("a", keys) == 2 and kv.store_blocks("b", keys) == 0
    kv.remove_sequence("b", keys)
    kv.remove_sequence("a", keys)
    assert kv.tree.num_stored_blocks() == 2
    summary = kv.analyze_prefix_reuse(keys)
    assert summary.first_new_block is None and summary.reusable_blocks_all == 2
    assert summary.reusable_blocks_allocated == 0
    kv.add_sequence("c", 24, [])  # 6 fresh blocks: the queue is [5, 6, b's 4, 3, a's 2, 1]
    assert kv.tree.num_stored_blocks() == 0
    kv.check_invariants()


def test_dry_run_counts_held_reuse_as_free():
    kv = manager(4)
    keys = [toks(1, 2, 3, 4), toks(5, 6, 7, 8)]
    kv.add_sequence("a", 9, keys)
    kv.store_blocks("a", keys)
    assert kv.free_blocks_needed(9, keys) == 1  # both full blocks held by a; one fresh for token 9
    assert kv.free_blocks_needed(8, keys[:1] + [toks(5, 6, 7)]) == 1  # a partial match takes a copy


def test_block_keys_stand_in_for_unknown_tokens():
    keys = BlockKeys(BS)
    a = Request("a", 0.0, 10, 4, prompt_block_hashes=(7, 8))
    b = Request("b", 0.0, 10, 4, prompt_block_hashes=(7, 9))
    c = Request("c", 0.0, 8, 4)
    ka, kb, kc = (keys.full_keys(r, r.num_tokens) for r in (a, b, c))
    assert ka[0] == kb[0] and ka[1] != kb[1] and kc[0] != ka[0]
    assert len(set(key_tokens(ka[0], BS))) == BS and keys.tokens(a, 8, 10) != keys.tokens(b, 8, 10)
    a.output_token_ids.extend([100, 101])
    assert keys.keys(a, 12)[-1][-2:] == (100, 101) and len(keys.keys(a, 11)) == 3
    keys.truncate("a", 9)
    assert len(keys.full_keys(a, 12)) == 3
    d = Request("d", 0.0, 5, 4, prompt_token_ids=[1, 2, 3, 4, 5])
    assert keys.keys(d, 5) == [toks(1, 2, 3, 4), toks(5)]


def test_a_full_block_of_stand_ins_is_keyed_by_its_first_and_matches_its_own_partial_tail():
    """A full stand-in block's key is its first stand-in (a machine-sized integer), the same
    whichever call builds it; a partial key of the same tokens (a re-admitted request's last
    prompt block) matches it partially, token by token."""
    keys = BlockKeys(BS)
    r = Request("r", 0.0, 11, 4)
    full = keys.full_keys(r, r.num_tokens)
    first, second = full
    assert isinstance(first, int) and isinstance(second, int) and second - first == BS
    assert STAND_IN_BASE <= first and second + BS < 1 << 62
    assert keys.tokens(r, 4, 8) == second and list(key_tokens(second, BS)) == list(range(second, second + BS))
    tail = keys.keys(r, 7)[-1]  # positions 4..6: three of the second block's stand-ins
    assert isinstance(tail, range) and list(tail) == list(range(second, second + 3))
    kv = manager()
    kv.add_sequence("r", 11, keys.keys(r, 10))
    kv.store_blocks("r", full)
    reused = kv.add_sequence("s", 8, [first, tail])  # the same tokens: one full match, then 3 of 4
    assert reused == BS + 3 and kv.drain_copies() == [(2, 4)]
    kv.check_invariants()


@settings(max_examples=100, deadline=None)
@given(
    prompt=st.integers(1, 30),
    hashes=st.none() | st.lists(st.integers(0, 3), max_size=9),
    outputs=st.lists(st.integers(3, 9), max_size=6),
    steps=st.lists(st.integers(0, 40), min_size=1, max_size=4),
)
def test_full_keys_are_the_tokens_of_each_block_however_they_grow(prompt, hashes, outputs, steps):
    """The keys made a prompt at a time are `tokens`' keys of each full block, whatever the
    trace gives (hashes for some or more than all full prompt blocks) and however far each call
    asks."""
    keys = BlockKeys(BS)
    r = Request("r", 0.0, prompt, 8, prompt_block_hashes=None if hashes is None else tuple(hashes))
    r.output_token_ids.extend(outputs)
    for n in steps:
        got = keys.full_keys(r, n)
        fresh = BlockKeys(BS)
        want = [fresh.tokens(r, i * BS, (i + 1) * BS) for i in range(min(n, r.num_tokens) // BS)]
        assert got == want


@st.composite
def operations(draw):
    """Random adds (prompts from three families), token growth, stores and releases."""
    ops = []
    for _ in range(draw(st.integers(1, 40))):
        kind = draw(st.sampled_from(["add", "add", "token", "store", "remove"]))
        ops.append((kind, draw(st.integers(0, 5)), draw(st.integers(0, 2)), draw(st.integers(1, 14))))
    return ops


@settings(max_examples=150, deadline=None)
@given(ops=operations(), blocks=st.integers(4, 12))
def test_random_operations_conserve_blocks_and_the_dry_run_is_exact(ops, blocks):
    kv = manager(blocks)
    tokens: dict[str, list[int]] = {}

    def chop(seq: list[int], n: int) -> list[tuple[int, ...]]:
        return [tuple(seq[i : min(i + BS, n)]) for i in range(0, n, BS)]

    for kind, who, family, length in ops:
        rid = f"r{who}"
        if kind == "add" and rid not in tokens:
            seq = [family * 100 + i for i in range(length)]
            keys = chop(seq, length - 1)
            need = kv.free_blocks_needed(length, keys)
            if need > kv.num_free_blocks:
                continue
            before = kv.num_free_blocks
            kv.add_sequence(rid, length, keys)
            assert before - kv.num_free_blocks == need
            tokens[rid] = seq
        elif kind == "token" and rid in tokens and (kv.num_tokens(rid) % BS or kv.num_free_blocks):
            kv.add_token(rid)
            tokens[rid].append(900 + len(tokens[rid]))
        elif kind == "store" and rid in tokens:
            n = kv.num_tokens(rid)
            kv.store_blocks(rid, [k for k in chop(tokens[rid], n - 1) if len(k) == BS])
        elif kind == "remove" and rid in tokens:
            seq = tokens.pop(rid)
            kv.remove_sequence(rid, chop(seq, kv.num_tokens(rid) - 1))
        kv.check_invariants()
    for rid in list(tokens):
        kv.remove_sequence(rid, None)
    assert kv.num_free_blocks == blocks
    kv.check_invariants()
