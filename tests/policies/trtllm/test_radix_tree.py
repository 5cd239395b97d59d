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
    tree = RadixTree(2)
    root = tree.root
    for key in ((1, 2), (1, 3), (2, 3)):
        root.add_child(key, tree.spare)
    assert [c.key for c in root.children_starting_with(1)] == [(1, 2), (1, 3)]
    root.remove_child((1, 2))
    root.add_child((1, 2), tree.spare)
    assert [c.key for c in root.children_starting_with(1)] == [(1, 3), (1, 2)]
    assert root.children_starting_with(7) == []
    tree.check_index()


def test_check_index_catches_a_child_the_index_missed():
    tree = RadixTree(2)
    tree.root.add_child((1, 2), tree.spare)
    tree.root.children_starting_with(1)
    tree.root.children[(1, 9)] = LookupNode((1, 9), tree.root)  # bypasses add_child
    with pytest.raises(AssertionError, match="first-token index"):
        tree.check_index()


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_index_follows_every_insert_and_removal(ops):
    tree = RadixTree(2)
    root = tree.root
    for op, key in ops:
        if op == "add" and key not in root.children:
            root.add_child(key, tree.spare)
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


def test_a_store_reuses_the_nodes_an_eviction_retired_as_fresh_ones():
    tree = RadixTree(2)
    blocks = [KVCacheBlock(i) for i in range(4)]
    assert tree.store_blocks([(1, 2), (3, 4)], blocks[:2]) == 2
    first = [b.node for b in blocks[:2]]
    tree.root.children_starting_with(1)  # builds the root's index
    tree.free_block_and_all_descendants(blocks[0])
    assert tree.num_stored_blocks() == 0 and tree.root.children == {} and len(tree.retired) == 2
    assert tree.store_blocks([(5, 6), (7, 8)], blocks[2:]) == 2
    second = [b.node for b in blocks[2:]]
    assert {id(n) for n in second} == {id(n) for n in first} and not tree.retired and not tree.spare
    top, leaf = second
    assert tree.root.children == {(5, 6): top} and top.children == {(7, 8): leaf}
    assert (top.parent, leaf.parent) == (tree.root, top) and top.by_first_token is None
    assert (top.block, leaf.block) == (blocks[2], blocks[3]) and not leaf.children
    tree.check_index()


def test_a_retired_node_something_hangs_on_is_not_reused():
    tree = RadixTree(2)
    blocks = [KVCacheBlock(i) for i in range(3)]
    tree.store_blocks([(1, 2)], blocks[:1])
    node = blocks[0].node
    tree.detach(blocks[0])
    assert tree.retired == [node]
    node.children[(9, 9)] = LookupNode((9, 9), node)  # an orphan hangs on it
    tree.store_blocks([(3, 4)], blocks[1:2])
    assert blocks[1].node is not node and not tree.spare and not tree.retired


def test_a_store_walks_through_the_sequences_own_blocks_and_restores_a_grown_partial_one():
    """Stored again (at release), a sequence matches the blocks it stored itself; its last block,
    stored partial and since filled, is moved under its full key, not matched under the old one."""
    tree = RadixTree(2)
    blocks = [KVCacheBlock(i) for i in range(3)]
    assert tree.store_blocks([(1, 2), (3,)], blocks[:2]) == 2
    first, partial = blocks[0].node, blocks[1].node
    assert tree.store_blocks([(1, 2), (3, 4), (5, 6)], blocks) == 2
    assert blocks[0].node is first and first.children == {(3, 4): blocks[1].node}
    grown = blocks[1].node
    assert grown is not partial and grown.key == (3, 4) and blocks[1].is_full
    assert grown.children == {(5, 6): blocks[2].node} and partial.block is None
    tree.check_index()
