"""The approximate prefix tree of a cache-aware router: which replica was sent which prompt prefix.

SGLang's router keeps a radix tree of the text it routed, each node tagged with the workers it
went to and when; it never asks the engines what they cache. This tree does the same over prompt
block hashes (one key per full KV block, chained by position, so a path from the root is a prefix).
A replica's share of the tree is bounded: past `max_blocks` the least recently routed leaves of
that replica are dropped, as the router's periodic eviction does.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence


class PrefixNode:
    """One block of some routed prompt: its children and, per replica, when it was last routed."""

    __slots__ = ("children", "key", "last", "parent")

    def __init__(self, parent: PrefixNode | None, key: int) -> None:
        self.parent = parent
        self.key = key
        self.children: dict[int, PrefixNode] = {}
        self.last: dict[int, float] = {}  # replica -> time this prefix was last routed there

    def is_leaf_of(self, replica: int) -> bool:
        """No child of this node is tagged with `replica` (so evicting it keeps prefixes whole)."""
        return not any(replica in c.last for c in self.children.values())


class ApproximatePrefixTree:
    """Routed prompt prefixes per replica, matched longest-first, bounded per replica."""

    def __init__(self, max_blocks: int | None = None) -> None:
        if max_blocks is not None and max_blocks < 1:
            raise ValueError(f"max_blocks must be None or >= 1, got {max_blocks}")
        self.root = PrefixNode(None, 0)
        self.max_blocks = max_blocks
        self.size: dict[int, int] = {}  # replica -> blocks tagged with it

    def match(self, hashes: Sequence[int]) -> dict[int, int]:
        """Replica -> leading blocks of `hashes` routed there before (replicas with none left out)."""
        node, depth = self.root, 0
        out: dict[int, int] = {}
        for h in hashes:
            child = node.children.get(h)
            if child is None:
                break
            depth += 1
            for r in child.last:
                out[r] = depth
            node = child
        return out

    def insert(self, hashes: Sequence[int], replica: int, now: float) -> None:
        """`hashes` was routed to `replica` at `now`; evict that replica's oldest leaves past the bound."""
        node = self.root
        size = self.size.get(replica, 0)
        for h in hashes:
            child = node.children.get(h)
            if child is None:
                child = node.children[h] = PrefixNode(node, h)
            if replica not in child.last:
                size += 1
            child.last[replica] = now
            node = child
        self.size[replica] = size
        if self.max_blocks is not None and size > self.max_blocks:
            self.evict(replica, self.max_blocks)

    def evict(self, replica: int, keep: int) -> None:
        """Drop `replica`'s least recently routed leaves until it holds `keep` blocks."""
        heap = [
            (n.last[replica], id(n), n) for n in self.nodes() if replica in n.last and n.is_leaf_of(replica)
        ]
        heapq.heapify(heap)
        size = self.size[replica]
        while size > keep and heap:
            _, _, node = heapq.heappop(heap)
            del node.last[replica]
            size -= 1
            parent = node.parent
            if not node.last and not node.children and parent is not None:
                del parent.children[node.key]
            if parent is not None and parent is not self.root and parent.is_leaf_of(replica):
                heapq.heappush(heap, (parent.last[replica], id(parent), parent))
        self.size[replica] = size

    def nodes(self) -> Iterator[PrefixNode]:
        """Every node below the root."""
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())
