"""SGLang's radix-tree prefix cache: UnifiedRadixCache with its full-attention component (0.5.23).

Keys are sequences of *units*, one per page (`page_size` tokens; a token at page size 1), so a
match, a split and an insert always fall on page boundaries, as SGLang's page-aligned keys do.
A node's value holds one KV block id per unit (a page is a block). The tree holds its own
reference on every block of every node (`BlockPool` reference counts); a request's block table
holds another on the blocks it reads, so a block returns to the pool only when neither the tree
nor any request references it.

- `match_prefix`: walk from the root; a match ending inside a node splits it there. The matched
  node is stamped with a fresh time and its ancestors with slightly older ones (SGLang's
  `_match_post_processor`), so a lookup refreshes the whole path for LRU.
- `insert`: walk (stamping each node it passes, splitting where the key diverges inside a node)
  and hang the rest of the key as a new leaf holding the caller's blocks.
- `lock` / `unlock`: reference counts on a node and all its ancestors; a node with a count moves
  from the evictable to the protected size.
- `evict`: whole leaves, least recently used first, from a heap of the unlocked leaves; a parent
  left childless joins the heap; stop once the pool has `num_tokens` more free tokens than
  before (SGLang's `evict_for_alloc` target) or nothing is left.

The clock is SGLang's counter (`get_and_increase_time_counter`): every new node, split and
walked node takes the next tick; a match stamps `tick` on its last node and `tick - depth` on
each ancestor (SGLang's `t - 1e-5 * depth`, in integers: `TICK` per tick).
"""

from __future__ import annotations

import heapq
from typing import Final

from ..kv_cache import BlockPool

Unit = int  # a token id, or a page's content hash
TICK: Final = 1 << 20  # time units per clock tick; a match's ancestors sit below its tick


class TreeNode:
    """One radix-tree segment: its key units, the KV blocks holding them, locks and recency."""

    __slots__ = ("children", "parent", "key", "value", "lock_ref", "last_access_time", "node_id")

    def __init__(
        self, parent: TreeNode | None, key: list[Unit], value: list[int], node_id: int, time: int
    ) -> None:
        self.children: dict[Unit, TreeNode] = {}
        self.parent = parent
        self.key = key
        self.value = value
        self.lock_ref = 0
        self.last_access_time = time
        self.node_id = node_id

    def __repr__(self) -> str:
        return f"TreeNode(id={self.node_id}, units={len(self.key)}, lock_ref={self.lock_ref})"


def common_prefix_len(node_key: list[Unit], key: list[Unit], offset: int) -> int:
    """Units of `node_key` equal to `key[offset:]` from the start."""
    n = min(len(node_key), len(key) - offset)
    if (node_key if n == len(node_key) else node_key[:n]) == key[offset : offset + n]:
        return n
    i = 0
    while node_key[i] == key[offset + i]:
        i += 1
    return i


class RadixCache:
    """The tree, its evictable/protected sizes (tokens) and the set of evictable leaves.

    `pool` is the block pool the tree takes references in; None for a scratch tree that only
    answers match lengths (lpm's in-batch check). `disable` is `--disable-radix-cache`: nothing
    matches, nothing is inserted, nothing is ever evictable.
    """

    def __init__(self, page_size: int, pool: BlockPool | None, disable: bool = False) -> None:
        if page_size < 1:
            raise ValueError(f"RadixCache.page_size must be >= 1, got {page_size}")
        self.page_size = page_size
        self.pool = pool
        self.disable = disable
        self.clock = 0
        self.num_nodes = 0
        self.root = self._new_node(None, [], [])
        self.root.lock_ref = 1  # never evicted, never counted
        self.evictable_units = 0
        self.protected_units = 0
        self.evictable_leaves: set[TreeNode] = set()

    # ---- sizes ----
    def evictable_size(self) -> int:
        """Tokens held by unlocked nodes: what eviction could give back."""
        return self.evictable_units * self.page_size

    def protected_size(self) -> int:
        """Tokens held by locked nodes (running requests' prefixes)."""
        return self.protected_units * self.page_size

    def total_size(self) -> int:
        """Tokens held by the tree."""
        return (self.evictable_units + self.protected_units) * self.page_size

    # ---- clock ----
    def _tick(self) -> int:
        """The next counter value (SGLang's get_and_increase_time_counter)."""
        self.clock += 1
        return self.clock * TICK

    def _new_node(self, parent: TreeNode | None, key: list[Unit], value: list[int]) -> TreeNode:
        """A node stamped with the next tick."""
        self.num_nodes += 1
        return TreeNode(parent, key, value, self.num_nodes, self._tick())

    # ---- lookups ----
    def match_prefix(self, key: list[Unit]) -> tuple[int, TreeNode]:
        """Longest cached prefix of `key` in units, and its last node (splitting a node the match
        ends inside); refreshes the path's recency."""
        if self.disable or not key:
            return 0, self.root
        node = self.root
        offset, n = 0, len(key)
        while offset < n:
            child = node.children.get(key[offset])
            if child is None:
                break
            m = common_prefix_len(child.key, key, offset)
            offset += m
            if m < len(child.key):
                node = self._split_node(child, m)
                break
            node = child
        self._stamp_path(node)
        return offset, node

    def peek_prefix(self, key: list[Unit]) -> tuple[int, int]:
        """What `match_prefix` would match, in units, and how many of them no lock holds yet (a
        lock on the match takes those from the evictable), splitting and stamping nothing."""
        if self.disable or not key:
            return 0, 0
        node = self.root
        offset, n, unlocked = 0, len(key), 0
        while offset < n:
            child = node.children.get(key[offset])
            if child is None:
                break
            m = common_prefix_len(child.key, key, offset)
            offset += m
            if child.lock_ref == 0:  # a split fragment takes its child's locks
                unlocked += m
            if m < len(child.key):
                break
            node = child
        return offset, unlocked

    def _stamp_path(self, node: TreeNode) -> None:
        """A fresh time on the matched node, one less per level on each ancestor."""
        t = self._tick()
        cur: TreeNode | None = node
        while cur is not None:
            cur.last_access_time = t
            t -= 1
            cur = cur.parent

    def path_value(self, node: TreeNode) -> list[int]:
        """The blocks from the root to `node`, in order."""
        parts: list[list[int]] = []
        cur = node
        while cur.parent is not None:
            parts.append(cur.value)
            cur = cur.parent
        out: list[int] = []
        for part in reversed(parts):
            out.extend(part)
        return out

    def path_len(self, node: TreeNode) -> int:
        """Units from the root to `node`."""
        n = 0
        cur = node
        while cur.parent is not None:
            n += len(cur.key)
            cur = cur.parent
        return n

    # ---- insertion ----
    def insert(self, key: list[Unit], value: list[int]) -> tuple[int, TreeNode]:
        """Insert `key` (one block per unit in `value`); returns the units already cached and the
        node the key ends on. Blocks of already-cached units are not taken (the caller frees its
        duplicates); a new leaf takes a tree reference on its blocks."""
        if self.disable:
            return 0, self.root
        self.root.last_access_time = self._tick()
        node = self.root
        total, n = 0, len(key)
        while total < n:
            child = node.children.get(key[total])
            if child is None:
                break
            child.last_access_time = self._tick()
            m = common_prefix_len(child.key, key, total)
            if m < len(child.key):
                child = self._split_node(child, m)
            node = child
            total += m
        if total < n:
            leaf_value = value[total:n]
            leaf = self._new_node(node, key[total:n], leaf_value)
            node.children[leaf.key[0]] = leaf
            if self.pool is not None:
                self.pool.touch(leaf_value)
            self.evictable_units += n - total
            self.evictable_leaves.add(leaf)
            self.evictable_leaves.discard(node)
            node = leaf
        return total, node

    def _split_node(self, child: TreeNode, split_len: int) -> TreeNode:
        """Cut `child` after `split_len` units; the new parent fragment is returned (fresh time),
        the child keeps its identity (and is stamped after it)."""
        parent = child.parent
        assert parent is not None
        new = self._new_node(parent, child.key[:split_len], child.value[:split_len])
        new.lock_ref = child.lock_ref
        child.key = child.key[split_len:]
        child.value = child.value[split_len:]
        child.parent = new
        new.children[child.key[0]] = child
        parent.children[new.key[0]] = new
        child.last_access_time = self._tick()
        return new

    # ---- locks ----
    def lock(self, node: TreeNode) -> None:
        """Protect `node` and its ancestors from eviction."""
        if self.disable:
            return
        cur = node
        while cur.parent is not None:
            if cur.lock_ref == 0:
                n = len(cur.key)
                self.evictable_units -= n
                self.protected_units += n
            cur.lock_ref += 1
            self.evictable_leaves.discard(cur)
            cur = cur.parent

    def unlock(self, node: TreeNode) -> None:
        """Drop one lock from `node` and its ancestors."""
        if self.disable:
            return
        cur = node
        while cur.parent is not None:
            assert cur.lock_ref > 0, f"unlock of an unlocked node {cur}"
            if cur.lock_ref == 1:
                n = len(cur.key)
                self.evictable_units += n
                self.protected_units -= n
            cur.lock_ref -= 1
            if cur.lock_ref == 0 and not cur.children:
                self.evictable_leaves.add(cur)
            cur = cur.parent

    # ---- eviction ----
    def evict(self, num_tokens: int) -> int:
        """Evict whole leaves, oldest first, until the pool has `num_tokens` more free tokens than
        now or nothing is evictable; returns the tokens evicted."""
        pool = self.pool
        if self.disable or num_tokens <= 0 or pool is None or not self.evictable_leaves:
            return 0
        page = self.page_size
        target = pool.num_free_blocks * page + num_tokens
        heap = [(n.last_access_time, n.node_id, n) for n in self.evictable_leaves]
        heapq.heapify(heap)
        evicted = 0
        leaves = self.evictable_leaves
        while heap:
            _, _, x = heapq.heappop(heap)
            if x not in leaves:
                continue
            parent = x.parent
            assert parent is not None
            evicted += self._delete_leaf(x)
            if pool.num_free_blocks * page >= target:
                break
            if parent in leaves:
                heapq.heappush(heap, (parent.last_access_time, parent.node_id, parent))
        return evicted * page

    def _delete_leaf(self, node: TreeNode) -> int:
        """Free an unlocked leaf's blocks and unhook it; returns its units."""
        parent = node.parent
        assert parent is not None and not node.children and node.lock_ref == 0
        del parent.children[node.key[0]]
        self.evictable_leaves.discard(node)
        n = len(node.key)
        self.evictable_units -= n
        if self.pool is not None:
            self.pool.free_blocks(node.value)
        if parent.parent is not None and parent.lock_ref == 0 and not parent.children:
            self.evictable_leaves.add(parent)
        return n

    # ---- checks ----
    def held_blocks(self) -> dict[int, int]:
        """Block id -> references the tree holds (one per node value entry)."""
        held: dict[int, int] = {}
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            for b in node.value:
                held[b] = held.get(b, 0) + 1
            stack.extend(node.children.values())
        return held

    def check_invariants(self, locks: dict[int, int] | None = None) -> None:
        """Sizes, leaf set, child keys and (given the locks each node should carry) lock counts."""
        evictable = protected = 0
        leaves: set[TreeNode] = set()
        stack = list(self.root.children.values())
        subtree_locks: dict[int, int] = {}
        order: list[TreeNode] = []
        while stack:
            node = stack.pop()
            order.append(node)
            assert node.key and len(node.key) == len(node.value), f"{node}: key/value mismatch"
            assert node.parent is not None and node.parent.children.get(node.key[0]) is node, (
                f"{node}: not its parent's child under its first unit"
            )
            if node.lock_ref:
                protected += len(node.key)
            else:
                evictable += len(node.key)
                if not node.children:
                    leaves.add(node)
            stack.extend(node.children.values())
        assert evictable == self.evictable_units, f"evictable {self.evictable_units} != {evictable}"
        assert protected == self.protected_units, f"protected {self.protected_units} != {protected}"
        assert leaves == self.evictable_leaves, "evictable leaf set is stale"
        if locks is not None:
            for node in reversed(order):  # children before parents
                own = locks.get(node.node_id, 0)
                below = sum(subtree_locks.get(c.node_id, 0) for c in node.children.values())
                subtree_locks[node.node_id] = own + below
                assert node.lock_ref == own + below, (
                    f"{node}: lock_ref {node.lock_ref} != {own + below} held on its subtree"
                )
