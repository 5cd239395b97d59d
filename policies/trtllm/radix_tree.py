"""TensorRT-LLM's lookup tree of reusable KV blocks (kvCacheManager.cpp: KVCacheBlock, the lookup node).

A node is one block key under its parent (the blocks before it); it holds at most one block, so a
key stored twice at the same position keeps the first copy only. Matching walks exact keys from
the root; with partial reuse a key that is not stored exactly may match the child sharing the
longest common prefix with it. Evicting a block takes it and its whole subtree out of the tree
(`freeBlockAndAllDescendants`): a block is reusable only with all the blocks before it. Keys are
`BlockKey`s: a full block of stand-ins is keyed by its first stand-in, which `key_tokens` expands
where tokens are compared one by one.
"""

from __future__ import annotations

from .block_keys import BlockKey, first_token, key_len, key_tokens


class KVCacheBlock:
    """One KV block: its id, how many sequences hold it, where it sits in the tree (if anywhere) and
    its neighbours in the free queue (None while a sequence holds it)."""

    __slots__ = ("block_id", "ref_count", "is_full", "node", "prev_free", "next_free")

    def __init__(self, block_id: int) -> None:
        """A fresh block: unreferenced, not in the tree, not queued."""
        self.block_id = block_id
        self.ref_count = 0
        self.is_full = False
        self.node: LookupNode | None = None
        self.prev_free: KVCacheBlock | None = None
        self.next_free: KVCacheBlock | None = None

    @property
    def is_leaf(self) -> bool:
        """No stored block continues it."""
        return self.node is None or not self.node.children

    def __repr__(self) -> str:
        """Id, references and tree membership (test failures print blocks)."""
        return f"KVCacheBlock({self.block_id}, refs={self.ref_count}, in_tree={self.node is not None})"


class LookupNode:
    """A position in the tree: the key of a block given the blocks before it.

    `by_first_token` indexes the children by their key's first token, each list in `children`'
    order: only those children share a prefix with a key, so a partial match reads only them. It is
    built at the node's first partial match (most nodes never see one) and kept in step after.
    """

    __slots__ = ("key", "parent", "children", "by_first_token", "block")

    def __init__(self, key: BlockKey, parent: LookupNode | None) -> None:
        """An empty node under `parent` (the root has none)."""
        self.key = key
        self.parent = parent
        self.children: dict[BlockKey, LookupNode] = {}
        self.by_first_token: dict[int, list[LookupNode]] | None = None
        self.block: KVCacheBlock | None = None

    def add_child(self, key: BlockKey, spare: list[LookupNode]) -> LookupNode:
        """A new empty child under `key` (not empty), last in both orders: a spare node where
        there is one (a node per stored block: allocating them is most of storing a prompt)."""
        if spare:
            child = spare.pop()
            child.key, child.parent = key, self
        else:
            child = LookupNode(key, self)
        self.children[key] = child
        index = self.by_first_token
        if index is not None:
            index.setdefault(first_token(key), []).append(child)
        return child

    def remove_child(self, key: BlockKey) -> None:
        """The child under `key` leaves the tree."""
        index = self.by_first_token
        if index is not None:
            first = first_token(key)
            siblings = index[first]
            siblings.remove(self.children[key])
            if not siblings:
                del index[first]
        del self.children[key]  # (compiled: a subscript deletion, where `pop` is a method call)

    def children_starting_with(self, token: int) -> list[LookupNode]:
        """The children whose key starts with `token`, in `children`' order."""
        index = self.by_first_token
        if index is None:
            index = self.by_first_token = {}
            for key, child in self.children.items():
                index.setdefault(first_token(key), []).append(child)
        return index.get(token, [])

    def clear_block(self, retired: list[LookupNode]) -> None:
        """Drop the node's block; nodes left empty and childless leave the tree, upwards, into
        `retired`."""
        self.block = None
        node = self
        parent = node.parent
        while parent is not None and node.block is None and not node.children:
            parent.remove_child(node.key)
            retired.append(node)
            node, parent = parent, parent.parent


def _common_prefix(a: BlockKey, b: BlockKey, tokens_per_block: int) -> int:
    """Number of leading tokens two keys share."""
    n = 0
    for x, y in zip(key_tokens(a, tokens_per_block), key_tokens(b, tokens_per_block), strict=False):
        if x != y:
            break
        n += 1
    return n


class RadixTree:
    """The lookup tree of one window's reusable blocks."""

    def __init__(self, tokens_per_block: int) -> None:
        """An empty tree of blocks of `tokens_per_block` tokens."""
        self.tokens_per_block = tokens_per_block
        self.root = LookupNode((), None)
        # nodes that left the tree, and those of them that `store_blocks` may reuse: a node
        # retired during a walk may still be the walk's position, so a store reuses only nodes
        # retired before it began (and only those still empty and childless)
        self.retired: list[LookupNode] = []
        self.spare: list[LookupNode] = []

    def find_matching_block(
        self, node: LookupNode, key: BlockKey, partial_reuse: bool, copy_on_partial_reuse: bool
    ) -> tuple[bool, int, KVCacheBlock | None]:
        """findMatchingBlock: (partial, matched tokens, block) for `key` under `node`.

        An exact key wins (partial when the stored block is not full). Otherwise, with partial
        reuse, the child sharing the longest common prefix (the earliest stored on a tie); without
        copy-on-partial-reuse only an unreferenced leaf qualifies, as it is taken over in place.
        """
        bs = self.tokens_per_block
        if not key:  # the empty key (a stand-in key, an int, is never 0)
            return False, 0, None
        exact = node.children.get(key)
        if exact is not None:
            block = exact.block
            if block is None:
                return False, 0, None
            return not block.is_full, key_len(key, bs), block
        if not partial_reuse:
            return False, 0, None
        best: list[tuple[int, int, LookupNode]] = []
        for order, child in enumerate(node.children_starting_with(first_token(key))):
            best.append((-_common_prefix(child.key, key, bs), order, child))
        best.sort(key=lambda m: (m[0], m[1]))
        for neg_shared, _, child in best:
            block = child.block
            if block is None:
                continue
            if copy_on_partial_reuse or (block.ref_count == 0 and block.is_leaf):
                return True, -neg_shared, block
        return False, 0, None

    def detach(self, block: KVCacheBlock) -> None:
        """Take one block out of the tree (its node goes if nothing else hangs on it)."""
        node = block.node
        if node is not None:
            block.node = None
            node.clear_block(self.retired)

    def free_block_and_all_descendants(self, block: KVCacheBlock) -> None:
        """The block and every block stored below it stop being reusable."""
        node = block.node
        if node is None:
            return
        if not node.children:  # a leaf, the common case: it goes alone
            self.detach(block)
            return
        found: list[KVCacheBlock] = []
        pending = list(node.children.values())
        while pending:
            child = pending.pop()
            if child.block is not None:
                found.append(child.block)
            pending.extend(child.children.values())
        for descendant in reversed(found):
            self.detach(descendant)
        self.detach(block)

    def prune(self, key: BlockKey) -> None:
        """The root's child under `key` and everything below it leave the tree; their blocks stay
        where they are (free or held) but are no longer reusable."""
        root = self.root
        top = root.children.get(key)
        if top is None:
            return
        root.remove_child(key)
        retired = self.retired
        pending = [top]
        while pending:
            node = pending.pop()
            block = node.block
            if block is not None:
                block.node = None
                node.block = None
            children = node.children
            if children:
                for child in children.values():
                    pending.append(child)
                children.clear()
            node.by_first_token = None
            retired.append(node)

    def store_blocks(self, keys: list[BlockKey], blocks: list[KVCacheBlock]) -> int:
        """storeBlocks: walk exact matches; from the first miss on, insert the sequence's blocks.

        A key already stored at its position keeps the stored block (the sequence's copy stays a
        plain block); returns how many of the sequence's blocks were inserted.
        """
        self._recycle()
        spare, bs = self.spare, self.tokens_per_block
        node = self.root
        need_match = True
        fresh = False  # `node` was added by this walk: it has no children to look up
        stored = 0
        for i in range(min(len(keys), len(blocks))):  # the keys may cover fewer blocks
            key, block = keys[i], blocks[i]
            if need_match:
                own = block.node  # the sequence's block, stored here already: the match, unhashed
                if own is not None and own.parent is node and own.key == key:
                    node = own
                    continue
                matched = node.children.get(key)
                if matched is not None and matched.block is not None:
                    node = matched
                    continue
            if block.node is not None:
                self.free_block_and_all_descendants(block)
            block.is_full = key_len(key, bs) == bs
            child = None if fresh else node.children.get(key)
            fresh = child is None
            if child is None:
                child = node.add_child(key, spare)
            if child.block is None:
                child.block = block
                block.node = child
            node = child
            stored += 1
            need_match = False
        return stored

    def _recycle(self) -> None:
        """Nodes retired since the last store become spare, unless something hangs on them."""
        spare = self.spare
        for node in self.retired:
            if node.block is None and not node.children:
                node.parent = node.by_first_token = None
                spare.append(node)
        self.retired.clear()

    def match_full_blocks(self, keys: list[BlockKey]) -> tuple[tuple[LookupNode, BlockKey] | None, int, int]:
        """findNewContextBlock + countReusableBlocks in one walk over full-block keys.

        Returns (the first block not stored, as (parent node, key), or None when every block is;
        blocks matched; of those, blocks some live sequence holds).
        """
        node = self.root
        total = held = 0
        for key in keys:
            child = node.children.get(key)
            block = child.block if child is not None else None
            if child is None or block is None:
                return (node, key), total, held
            total += 1
            held += block.ref_count > 0
            node = child
        return None, total, held

    def num_stored_blocks(self) -> int:
        """Blocks in the tree (tests, invariants)."""
        n = 0
        stack = [self.root]
        while stack:
            node = stack.pop()
            n += node.block is not None
            stack.extend(node.children.values())
        return n

    def check_index(self) -> None:
        """Every node's first-token index (where built) lists exactly its children, in their order."""
        stack = [self.root]
        while stack:
            node = stack.pop()
            grouped: dict[int, list[LookupNode]] = {}
            for key, child in node.children.items():
                placed = key != () and child.key == key and child.parent is node
                assert placed, f"tree node under {key} misplaced"
                grouped.setdefault(first_token(key), []).append(child)
            index = node.by_first_token
            assert index is None or grouped == index, f"first-token index of node {node.key} differs"
            stack.extend(node.children.values())
