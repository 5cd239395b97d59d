"""TensorRT-LLM's free-block queue (evictionPolicy.cpp's LRUEvictionPolicy, one priority level).

Every block no sequence holds is in the queue, reusable ones included: a released block goes to the
back, a reused one leaves from wherever it is, and `get_free_block` takes the front (the least
recently released). The queue is a doubly linked list threaded through the blocks themselves
(`prev_free` / `next_free`, around a sentinel), so each of the three is a few attribute writes:
they run once per KV block a request allocates or releases.
"""

from __future__ import annotations

from .radix_tree import KVCacheBlock


class LRUEvictionPolicy:
    """The free blocks, least recently released first."""

    __slots__ = ("sentinel", "num_free")

    def __init__(self, blocks: list[KVCacheBlock]) -> None:
        """A queue of `blocks`, in their order."""
        sentinel = self.sentinel = KVCacheBlock(-1)  # next_free: the front; prev_free: the back
        sentinel.next_free = sentinel.prev_free = sentinel
        self.num_free = 0
        for block in blocks:
            self.release(block)

    def release(self, block: KVCacheBlock) -> None:
        """releaseBlock: a block nobody holds goes to the back (one already queued stays put)."""
        if block.next_free is not None:
            return
        sentinel = self.sentinel
        back = sentinel.prev_free
        assert back is not None
        block.prev_free, block.next_free = back, sentinel
        back.next_free = sentinel.prev_free = block
        self.num_free += 1

    def claim(self, block: KVCacheBlock) -> None:
        """claimBlock: a reused block leaves the queue, if it is in it."""
        before, after = block.prev_free, block.next_free
        if before is None or after is None:
            return
        before.next_free, after.prev_free = after, before
        block.prev_free = block.next_free = None
        self.num_free -= 1

    def get_free_block(self) -> KVCacheBlock:
        """getFreeBlock: the front block leaves the queue."""
        block = self.sentinel.next_free
        if block is None or block is self.sentinel:
            raise ValueError("LRUEvictionPolicy: the free queue is empty")
        self.claim(block)
        return block

    def block_ids(self) -> list[int]:
        """The free blocks' ids, front first (tests, snapshots)."""
        out: list[int] = []
        block = self.sentinel.next_free
        while block is not None and block is not self.sentinel:
            out.append(block.block_id)
            block = block.next_free
        return out

    def is_free(self, block: KVCacheBlock) -> bool:
        """Whether the block is in the queue."""
        return block.next_free is not None
