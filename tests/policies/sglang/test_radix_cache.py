"""SGLang's radix tree (policies/sglang/radix_cache.py): matches split nodes at any unit, inserts
hang new leaves, locks protect paths, eviction takes whole leaves least recently used first on
SGLang's counter clock; a hypothesis run of random operations keeps every invariant."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schedsim.policies.kv_cache import BlockPool
from schedsim.policies.sglang.radix_cache import TICK, RadixCache

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree


def _tree(blocks: int = 64, page: int = 1) -> tuple[RadixCache, BlockPool]:
    pool = BlockPool(blocks + 1, enable_caching=False)
    return RadixCache(page, pool), pool


def _insert(tree: RadixCache, pool: BlockPool, key: list[int]) -> list[int]:
    """Insert like a request that computed `key` on fresh blocks, then drops its own references."""
    row = pool.get_new_blocks(len(key))
    tree.insert(key, row)
    pool.free_blocks(row)
    return row


def _paths(tree: RadixCache) -> list[tuple[int, ...]]:
    """Every node's key from the root, sorted."""
    out = []
    stack = [(tree.root, ())]
    while stack:
        node, prefix = stack.pop()
        for child in node.children.values():
            path = prefix + tuple(child.key)
            out.append(path)
            stack.append((child, path))
    return sorted(out)


def test_match_splits_a_node_at_any_token_and_keeps_the_suffix_identity():
    tree, pool = _tree()
    _insert(tree, pool, [1, 2, 3, 4, 5])
    leaf = tree.root.children[1]
    matched, node = tree.match_prefix([1, 2, 3, 9])
    assert matched == 3 and node is not leaf and node.key == [1, 2, 3]
    assert leaf.parent is node and leaf.key == [4, 5]  # the suffix keeps its identity
    assert _paths(tree) == [(1, 2, 3), (1, 2, 3, 4, 5)]
    assert tree.path_value(leaf) == tree.path_value(node) + leaf.value
    tree.check_invariants()


def test_match_stamps_the_node_and_slightly_older_ancestors():
    """SGLang stamps the matched node with a new tick t and each ancestor with t - 1e-5 * depth:
    newer than anything before t, older than the node."""
    tree, pool = _tree()
    _insert(tree, pool, [1, 2, 3])
    _insert(tree, pool, [1, 2, 3, 4, 5])
    _insert(tree, pool, [7, 8])
    inner, leaf, other = tree.root.children[1], tree.root.children[1].children[4], tree.root.children[7]
    before = other.last_access_time
    matched, node = tree.match_prefix([1, 2, 3, 4, 5])
    assert node is leaf and matched == 5
    assert leaf.last_access_time == tree.clock * TICK
    assert inner.last_access_time == leaf.last_access_time - 1
    assert inner.last_access_time > before


def test_insert_returns_the_cached_units_and_hangs_only_the_rest():
    tree, pool = _tree()
    first = _insert(tree, pool, [1, 2, 3, 4])
    row = pool.get_new_blocks(6)
    prefix, node = tree.insert([1, 2, 3, 4, 5, 6], row)
    assert prefix == 4 and node.key == [5, 6] and node.value == row[4:]
    assert tree.path_value(node) == first + row[4:]  # the cached units keep the tree's blocks
    assert pool.ref_cnt[row[0]] == 1 and pool.ref_cnt[row[4]] == 2  # duplicates: caller's only
    assert tree.evictable_size() == 6
    again, same = tree.insert([1, 2, 3, 4], row)
    assert again == 4 and same is tree.root.children[1]


def test_locks_move_tokens_between_evictable_and_protected():
    tree, pool = _tree()
    _insert(tree, pool, [1, 2, 3, 4])
    _, node = tree.match_prefix([1, 2])
    tree.lock(node)
    assert (tree.evictable_size(), tree.protected_size()) == (2, 2)
    assert tree.evict(10) == 2  # only the unlocked leaf [3, 4]
    assert _paths(tree) == [(1, 2)]
    tree.unlock(node)
    assert (tree.evictable_size(), tree.protected_size()) == (2, 0)
    assert tree.evictable_leaves == {node}
    tree.check_invariants()


def test_eviction_takes_whole_leaves_oldest_first_and_stops_at_the_target():
    """Three leaves; a 1-token shortfall evicts the oldest whole leaf, a later one continues with
    the next oldest and then its parent once that became a leaf."""
    tree, pool = _tree(blocks=20)
    _insert(tree, pool, [1, 2, 3, 4])  # shared [1, 2] + leaf [3, 4]
    _insert(tree, pool, [1, 2, 5, 6, 7])  # leaf [5, 6, 7]
    _insert(tree, pool, [9, 9, 9])  # leaf [9, 9, 9]
    tree.match_prefix([1, 2, 3, 4])  # [1, 2, 3, 4] now the most recent
    free = pool.num_free_blocks
    assert tree.evict(1) == 3  # the whole [5, 6, 7], though 1 token was asked for
    assert pool.num_free_blocks == free + 3
    assert tree.evict(4) == 5  # [9, 9, 9], then [3, 4]: 5 >= 4
    assert _paths(tree) == [(1, 2)]
    tree.check_invariants()


def test_a_parent_left_childless_joins_the_eviction_in_order():
    tree, pool = _tree(blocks=20)
    _insert(tree, pool, [1, 2, 3])
    _insert(tree, pool, [1, 2, 4])  # [1, 2] shared, older than both leaves
    _insert(tree, pool, [8, 8])  # newest leaf
    assert tree.evict(4) == 4  # [3], [4], then their parent [1, 2] (older than [8, 8])
    assert _paths(tree) == [(8, 8)]


def test_page_units_count_page_size_tokens():
    tree, pool = _tree(page=4)
    row = pool.get_new_blocks(3)
    tree.insert([70, 71, 72], row)  # one unit (a block) per page of 4 tokens
    pool.free_blocks(row)
    assert tree.evictable_size() == 12
    matched, _ = tree.match_prefix([70, 71, 99])
    assert matched == 2
    assert tree.evict(1) == 4  # the [72] leaf after the split: a whole page


def test_disabled_tree_matches_and_keeps_nothing():
    pool = BlockPool(10, enable_caching=False)
    tree = RadixCache(1, pool, disable=True)
    row = pool.get_new_blocks(3)
    assert tree.insert([1, 2, 3], row) == (0, tree.root)
    assert tree.match_prefix([1, 2, 3]) == (0, tree.root)
    assert tree.evictable_size() == 0 and tree.evict(5) == 0


ops = st.lists(
    st.tuples(
        st.sampled_from(["insert", "match", "lock", "unlock", "evict"]),
        st.lists(st.integers(0, 3), min_size=1, max_size=8),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops)
def test_random_operations_keep_every_invariant(ops):
    """Sizes, the leaf set, lock counts and block references stay consistent; a match returns
    the longest cached prefix and ends exactly at its node; eviction frees what it says."""
    tree, pool = _tree(blocks=200)
    locks: list = []
    for op, key in ops:
        if op == "insert" and pool.num_free_blocks >= len(key):
            _insert(tree, pool, key)
        elif op == "match":
            cached = set(_paths(tree))
            matched, node = tree.match_prefix(key)
            assert matched == max(
                [
                    n
                    for n in range(len(key) + 1)
                    if n == 0 or tuple(key[:n]) in {p[:n] for p in cached if len(p) >= n}
                ]
            )
            assert tree.path_len(node) == matched
        elif op == "lock":
            _, node = tree.match_prefix(key)
            tree.lock(node)
            locks.append(node)
        elif op == "unlock" and locks:
            tree.unlock(locks.pop(len(key) % len(locks)))
        elif op == "evict":
            free, evictable = pool.num_free_blocks, tree.evictable_size()
            evicted = tree.evict(len(key))
            assert pool.num_free_blocks == free + evicted
            assert evicted >= min(len(key), evictable) or tree.evictable_size() == 0
        counts: dict[int, int] = {}
        for node in locks:
            counts[node.node_id] = counts.get(node.node_id, 0) + 1
        tree.check_invariants(counts)
        pool.check_invariants(tree.held_blocks())
