"""The radix tree's first-token index: after any mix of inserts, removals and partial matches it lists
each node's children starting with a token in the tree's order, and partial matching finds what a
scan of every child would."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schedsim.policies.trtllm.radix_tree import KVCacheBlock, LookupNode, RadixTree

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree

KEYS = st.tuples(st.integers(0, 3), st.integers(0, 3)).map(tuple)
OPS = st.lists(st.tuples(st.sampled_from(["add", "remove", "match"]), KEYS), max_size=60)


def scan(node: LookupNode, key: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The children sharing a prefix with `key`, longest first, earliest first on a tie."""
    shared = []
    for order, (child_key, _) in enumerate(node.children.items()):
        n = 0
        for x, y in zip(child_key, key, strict=False):
            if x != y:
                break
            n += 1
        if n:
            shared.append((-n, order, child_key))
    return [k for _, _, k in sorted(shared)]


def test_a_removed_child_leaves_the_index_and_a_new_one_comes_last():
    tree = RadixTree()
    root = tree.root
    for key in ((1, 2), (1, 3), (2, 3)):
        root.add_child(key)
    assert [c.key for c in root.children_starting_with(1)] == [(1, 2), (1, 3)]
    root.remove_child((1, 2))
    root.add_child((1, 2))
    assert [c.key for c in root.children_starting_with(1)] == [(1, 3), (1, 2)]
    assert root.children_starting_with(7) == []
    tree.check_index()


def test_check_index_catches_a_child_the_index_missed():
    tree = RadixTree()
    tree.root.add_child((1, 2))
    tree.root.children_starting_with(1)
    tree.root.children[(1, 9)] = LookupNode((1, 9), tree.root)  # bypasses add_child
    with pytest.raises(AssertionError, match="first-token index"):
        tree.check_index()


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_index_follows_every_insert_and_removal(ops):
    tree = RadixTree()
    root = tree.root
    for op, key in ops:
        if op == "add" and key not in root.children:
            root.add_child(key)
        elif op == "remove" and key in root.children:
            root.remove_child(key)
        elif op == "match":
            expected = [k for k in root.children if k[0] == key[0]]
            assert [c.key for c in root.children_starting_with(key[0])] == expected
        tree.check_index()
    for i, child in enumerate(root.children.values()):
        child.block = KVCacheBlock(i)
        child.block.is_full = True
    for _, key in ops:
        partial, n, block = tree.find_matching_block(root, key, True, True)
        if key in root.children:
            assert (partial, n, block) == (False, len(key), root.children[key].block)
            continue
        candidates = scan(root, key)
        if not candidates:
            assert (partial, n, block) == (False, 0, None)
            continue
        best = root.children[candidates[0]]
        assert partial and block is best.block
        assert n == 1  # the first token: two equal tokens would be the exact match
