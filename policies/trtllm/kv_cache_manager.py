"""TensorRT-LLM's KV cache manager (kvCacheManager.cpp's KVCacheManager / WindowBlockManager, one window).

Each sequence is a `GenerationRequest` (its blocks and its token count), one lookup per call;
its block ids (`cacheBlockIds`) are read off its blocks when a plan's block table is asked for.
Blocks are free when no sequence holds them; a free block may still be in the lookup tree, and is
reusable until evicted. The free queue is the LRU eviction policy at one priority level: a
released block goes to the back, `getFreeBlock` takes the front and evicts it with its whole
subtree. What each call does:

- `add_sequence(rid, input_length, keys)` (addSequence with reuse): walk the tree over the keys of
  tokens [0, input_length - 1) (the last one partial), claiming exact matches; a partial match (a
  common prefix, or an exact match of a stored partial block) is copied into a fresh block when
  someone holds it or blocks continue it, else taken over; after the first partial match or miss,
  fresh blocks. Returns the tokens matched (the prepopulated prompt length). Without reuse, only
  fresh blocks.
- `add_token(rid)` / `remove_token(rid)`: one more (one fewer) token; a block boundary adds (frees) a block.
- `store_blocks(rid, keys)`: storeBlocks over the sequence's blocks (storeContextBlocks and the
  store at release use it).
- `remove_sequence(rid, keys)`: releaseBlocks: store (when keys are given), then release the blocks
  last first. `remove_private_sequence(rid, root_key)`: the same for a finished request that only
  its own keys reach, its subtree pruned instead of stored (nobody could reuse it).
- `analyze_prefix_reuse(full_keys)`: the first block not stored, and how many are.
- `start_scheduling` / `scheduling_remove_sequence` / `scheduling_has_free_blocks`: the scheduling view
  max-utilization probes (shared blocks free only with their last holder).

A call that needs a block when none is free raises `KvCacheExhaustedError` after changing nothing
that a caller could still use (TensorRT-LLM's TLLM_CHECK fails the batch there). A growable manager
(max-requests, which has no KV cache manager in TensorRT-LLM and only needs block tables to execute
its batches) adds a block instead; its usage then stays at 1.
"""

from __future__ import annotations

from collections.abc import Container

from .block_keys import BlockKey
from .errors import KvCacheExhaustedError
from .eviction_policy import LRUEvictionPolicy
from .radix_tree import KVCacheBlock, LookupNode, RadixTree

FIRST_BLOCK_ID = 1  # block 0 stays unused, as the simulator's and the real executor's null block


class PrefixReuseSummary:
    """analyzePrefixReuse: the first block not stored and how many full blocks are.

    A plain class, not a dataclass: one is built per context request and schedule, and a
    compiled dataclass's generated `__init__` stays interpreted code.
    """

    __slots__ = ("first_new_block", "reusable_blocks_allocated", "reusable_blocks_all")

    def __init__(
        self,
        first_new_block: tuple[LookupNode, BlockKey] | None = None,
        reusable_blocks_allocated: int = 0,
        reusable_blocks_all: int = 0,
    ) -> None:
        # (parent node, key) of the first full block not in the tree; None when every one is.
        self.first_new_block = first_new_block
        # stored blocks some live sequence holds: reusing them takes no free block
        self.reusable_blocks_allocated = reusable_blocks_allocated
        self.reusable_blocks_all = reusable_blocks_all


NO_REUSE = PrefixReuseSummary()


class GenerationRequest:
    """One sequence's KV state (kvCacheManager.h's GenerationRequest): its blocks and its tokens."""

    __slots__ = ("request_id", "num_tokens", "blocks")

    def __init__(self, request_id: str, num_tokens: int) -> None:
        """A sequence of `num_tokens` tokens with no blocks yet."""
        self.request_id = request_id
        self.num_tokens = num_tokens  # tokens its blocks are sized for
        self.blocks: list[KVCacheBlock] = []

    def hold(self, block: KVCacheBlock) -> None:
        """Append a block to the sequence's table."""
        block.ref_count += 1
        self.blocks.append(block)


class KVCacheManager:
    """Sequences' block tables over one pool, with TensorRT-LLM's radix-tree reuse."""

    def __init__(
        self,
        num_blocks: int,
        tokens_per_block: int,
        max_seq_len: int,
        enable_block_reuse: bool = True,
        enable_partial_reuse: bool = True,
        copy_on_partial_reuse: bool = True,
        growable: bool = False,
    ) -> None:
        """`num_blocks` usable blocks, ids FIRST_BLOCK_ID.. in the initial free order."""
        for name, value in (
            ("num_blocks", num_blocks),
            ("tokens_per_block", tokens_per_block),
            ("max_seq_len", max_seq_len),
        ):
            if value < 1:
                raise ValueError(f"KVCacheManager.{name} must be >= 1, got {value}")
        self.pool_blocks = num_blocks  # the configured pool
        self.num_blocks = num_blocks  # blocks that exist (more than the pool only when growable)
        self.growable = growable
        self.tokens_per_block = tokens_per_block
        self.max_seq_len = max_seq_len
        self.enable_block_reuse = enable_block_reuse
        self.enable_partial_reuse = enable_partial_reuse
        self.copy_on_partial_reuse = copy_on_partial_reuse
        self.blocks = [KVCacheBlock(i) for i in range(num_blocks + FIRST_BLOCK_ID)]
        self.free_queue = LRUEvictionPolicy(self.blocks[FIRST_BLOCK_ID:])
        self.tree = RadixTree(tokens_per_block)
        self.sequences: dict[str, GenerationRequest] = {}
        # (source, destination) block ids whose KV a partial reuse copies; the policy drains it
        self.pending_copies: list[tuple[int, int]] = []
        self.scheduling_free = 0
        self._scheduling_refs: dict[int, int] = {}

    # ---- queries ----
    @property
    def num_free_blocks(self) -> int:
        """getNumFreeBlocks: blocks no sequence holds (reusable ones included)."""
        return self.free_queue.num_free

    @property
    def usage(self) -> float:
        """Fraction of the configured pool some sequence holds (1 once a growable one exceeds it)."""
        return min(1.0, (self.num_blocks - self.free_queue.num_free) / self.pool_blocks)

    @property
    def stored_roots(self) -> Container[BlockKey]:
        """The keys of the tree's first level (a walk over a request's keys starts there)."""
        return self.tree.root.children

    def get_block_ids(self, request_id: str) -> list[int]:
        """The sequence's block table (cacheBlockIds), empty when it has none: read off its blocks
        when asked for (only the real backend asks), not kept in step with every block."""
        seq = self.sequences.get(request_id)
        return [] if seq is None else [block.block_id for block in seq.blocks]

    def num_blocks_of(self, request_id: str) -> int:
        """Blocks the sequence holds."""
        seq = self.sequences.get(request_id)
        return 0 if seq is None else len(seq.blocks)

    def has_sequence(self, request_id: str) -> bool:
        """Whether the request holds a sequence."""
        return request_id in self.sequences

    def num_tokens(self, request_id: str) -> int:
        """Tokens the sequence's blocks are sized for."""
        return self.sequences[request_id].num_tokens

    # ---- the free queue ----
    def _get_free_block(self) -> KVCacheBlock:
        """getFreeBlock: the front of the free queue, evicted from the tree with its subtree."""
        if not self.free_queue.num_free:
            if not self.growable:
                raise KvCacheExhaustedError("no free KV block left")
            self.blocks.append(KVCacheBlock(len(self.blocks)))
            self.num_blocks += 1
            return self.blocks[-1]
        block = self.free_queue.get_free_block()
        self.tree.free_block_and_all_descendants(block)
        return block

    # ---- sequences ----
    def add_sequence(self, request_id: str, input_length: int, keys: list[BlockKey]) -> int:
        """addSequence: blocks for `input_length` tokens, reusing stored ones; returns tokens reused.

        `keys` are the keys of tokens [0, input_length - 1) with a partial last one. Fails (before
        changing anything) when the pool cannot give the fresh blocks needed.
        """
        if request_id in self.sequences:
            raise ValueError(f"KVCacheManager: sequence {request_id} already added")
        bs = self.tokens_per_block
        num_blocks = -(-input_length // bs)
        needed = self.free_blocks_needed(input_length, keys)
        if needed > self.free_queue.num_free and not self.growable:
            raise KvCacheExhaustedError(
                f"sequence {request_id} needs {needed} free KV blocks, {self.free_queue.num_free} are free"
            )
        seq = self.sequences[request_id] = GenerationRequest(request_id, input_length)
        if not self.enable_block_reuse:
            for _i in range(num_blocks):
                seq.hold(self._get_free_block())
            return 0
        search: LookupNode | None = self.tree.root
        matched = 0
        for idx in range(num_blocks):
            key = keys[idx] if idx < len(keys) else ()
            block: KVCacheBlock | None = None
            partial = False
            if search is not None:
                partial, n, block = self.tree.find_matching_block(
                    search, key, self.enable_partial_reuse, self.copy_on_partial_reuse
                )
            if block is None:
                seq.hold(self._get_free_block())
                search = None
                continue
            matched += n
            if not partial:
                self.free_queue.claim(block)
                search = block.node
                seq.hold(block)
                continue
            if block.ref_count > 0 or not block.is_leaf:
                fresh = self._get_free_block()  # copy the matched tokens into a fresh block
                self.pending_copies.append((block.block_id, fresh.block_id))
                block = fresh
            else:
                self.tree.detach(block)  # freeLeafBlock: the sequence takes it over
                self.free_queue.claim(block)
            seq.hold(block)
            search = None
        return matched

    def free_blocks_needed(self, input_length: int, keys: list[BlockKey]) -> int:
        """Free-queue entries add_sequence would take (a dry run of its walk)."""
        num_blocks = -(-input_length // self.tokens_per_block)
        if not self.enable_block_reuse:
            return num_blocks
        node: LookupNode | None = self.tree.root
        held = 0
        for idx in range(num_blocks):
            if node is None:
                break
            key = keys[idx] if idx < len(keys) else ()
            partial, _, block = self.tree.find_matching_block(
                node, key, self.enable_partial_reuse, self.copy_on_partial_reuse
            )
            if block is None or partial:
                break  # a miss, a copy and a taken-over free leaf all take one free entry
            held += block.ref_count > 0
            node = block.node
        return num_blocks - held

    def add_token(self, request_id: str) -> None:
        """addToken: the sequence grows by one token; a new block starts every tokens_per_block."""
        seq = self.sequences[request_id]
        if seq.num_tokens % self.tokens_per_block == 0:
            if not self.free_queue.num_free and not self.growable:
                raise KvCacheExhaustedError(f"sequence {request_id} needs a new KV block, none is free")
            seq.hold(self._get_free_block())
        seq.num_tokens += 1

    def fast_forward_tokens(self, request_id: str, num_tokens: int) -> None:
        """Set the token count where its blocks already hold it (a fast-forward between boundaries)."""
        seq = self.sequences[request_id]
        blocks = len(seq.blocks)
        if -(-num_tokens // self.tokens_per_block) != blocks:
            raise ValueError(
                f"KVCacheManager: {num_tokens} tokens do not fit sequence {request_id}'s "
                f"{blocks} blocks exactly"
            )
        seq.num_tokens = num_tokens

    def remove_token(self, request_id: str) -> None:
        """removeToken (rewinding rejected drafts): a block left empty is released."""
        seq = self.sequences[request_id]
        n = seq.num_tokens
        if n < 1:
            raise ValueError(f"KVCacheManager: sequence {request_id} has no token to remove")
        seq.num_tokens = n - 1
        if (n - 1) % self.tokens_per_block == 0:
            block = seq.blocks.pop()
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free_queue.release(block)

    def store_blocks(self, request_id: str, keys: list[BlockKey]) -> int:
        """storeBlocks over the sequence's first len(keys) blocks; returns how many were inserted."""
        seq = self.sequences.get(request_id)
        if seq is None or not self.enable_block_reuse:
            return 0  # "Can not find sequence": the request already released its blocks
        return self.tree.store_blocks(keys, seq.blocks)

    def remove_sequence(self, request_id: str, keys: list[BlockKey] | None) -> None:
        """releaseBlocks: store the blocks under `keys` (if given), then release them last first."""
        seq = self.sequences.pop(request_id, None)
        if seq is None:
            return
        blocks = seq.blocks
        if keys is not None and self.enable_block_reuse:
            self.tree.store_blocks(keys, blocks)
        for block in reversed(blocks):
            if block.ref_count > 0:
                block.ref_count -= 1
            if block.ref_count == 0:
                self.free_queue.release(block)

    def remove_private_sequence(self, request_id: str, root_key: BlockKey) -> None:
        """releaseBlocks for a finished request whose blocks only its own keys reach (`root_key`,
        its first block's): storing them would make them reusable by nobody, so its subtree
        leaves the tree instead and its blocks are released last first, unstored. No lookup can
        tell the difference; their eviction later finds them out of the tree already."""
        self.tree.prune(root_key)
        self.remove_sequence(request_id, None)

    # ---- prefix reuse ----
    def analyze_prefix_reuse(self, full_keys: list[BlockKey]) -> PrefixReuseSummary:
        """analyzePrefixReuse: one walk of the request's full-block keys."""
        if not self.enable_block_reuse:
            return NO_REUSE
        first_new, total, held = self.tree.match_full_blocks(full_keys)
        return PrefixReuseSummary(first_new, held, total)

    # ---- the scheduling view ----
    def start_scheduling(self) -> None:
        """startScheduling: the simulated free count starts at the real one."""
        self.scheduling_free = self.free_queue.num_free
        self._scheduling_refs = {}

    def scheduling_remove_sequence(self, request_id: str) -> None:
        """schedulingRemoveSequence: drop one scheduling reference of each of the sequence's blocks."""
        refs = self._scheduling_refs
        seq = self.sequences.get(request_id)
        if seq is None:
            return
        for block in seq.blocks:
            left = refs.get(block.block_id, block.ref_count) - 1
            if left < 0:
                raise ValueError(f"KVCacheManager: block {block.block_id} removed from scheduling twice")
            refs[block.block_id] = left
            if left == 0:
                self.scheduling_free += 1

    def scheduling_has_free_blocks(self, num_required: int) -> bool:
        """schedulingHasFreeBlocks."""
        return num_required <= self.scheduling_free

    # ---- checks ----
    def drain_copies(self) -> list[tuple[int, int]]:
        """The partial-reuse copies made since the last call."""
        copies, self.pending_copies = self.pending_copies, []
        return copies

    def snapshot(self) -> tuple[object, ...]:
        """Everything later calls can depend on, as comparable data: tables, token counts, the free
        queue's order, reference counts and the tree (children in insertion order)."""

        def tree(node: LookupNode) -> tuple[object, ...]:
            block = node.block
            return (
                node.key,
                None if block is None else (block.block_id, block.is_full),
                tuple(tree(child) for child in node.children.values()),
            )

        return (
            {rid: [b.block_id for b in seq.blocks] for rid, seq in self.sequences.items()},
            {rid: seq.num_tokens for rid, seq in self.sequences.items()},
            self.free_queue.block_ids(),
            [b.ref_count for b in self.blocks],
            self.num_blocks,
            tree(self.tree.root),
        )

    def check_invariants(self) -> None:
        """Every block is either free or held by exactly its ref count of sequences; tables fit tokens."""
        refs: dict[int, int] = {}
        for rid, seq in self.sequences.items():
            assert seq.request_id == rid, f"sequence {rid} filed under {seq.request_id}"
            blocks, n = seq.blocks, seq.num_tokens
            assert len(blocks) == -(-n // self.tokens_per_block), (
                f"sequence {rid}: {len(blocks)} blocks for {n} tokens"
            )
            for block in blocks:
                refs[block.block_id] = refs.get(block.block_id, 0) + 1
        for block in self.blocks[FIRST_BLOCK_ID:]:
            held = refs.get(block.block_id, 0)
            assert block.ref_count == held, f"block {block.block_id}: ref count {block.ref_count} != {held}"
            queued = self.free_queue.is_free(block)
            assert (held == 0) == queued, (
                f"block {block.block_id}: held by {held} sequences, in the free queue: {queued}"
            )
            node = block.node
            assert node is None or node.block is block, (
                f"block {block.block_id}: its tree node holds another block"
            )
        assert self.free_queue.num_free + len(refs) == self.num_blocks, "KV blocks not conserved"
        assert self.free_queue.num_free == len(self.free_queue.block_ids()), "free queue miscounted"
        self.tree.check_index()
