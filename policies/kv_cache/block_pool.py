"""BlockPool: fixed-size KV blocks, an LRU free queue and the prefix-cache hash map (vLLM's BlockPool)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

NULL_BLOCK_ID = 0


class BlockPool:
    """Owns every block's ref count and hash; block 0 is the null block and is never handed out.

    The free queue holds every block with ref_cnt 0, cached (hashed) ones included: they stay
    reusable by prefix hits until `get_new_blocks` pops them from the front and evicts their hash.
    Freed blocks without a hash go to the front (reused first), hashed ones to the back (LRU).
    """

    __slots__ = ("num_gpu_blocks", "enable_caching", "ref_cnt", "block_hash", "free_queue",
                 "cached")

    def __init__(self, num_gpu_blocks: int, enable_caching: bool) -> None:
        if num_gpu_blocks < 2:
            raise ValueError(f"BlockPool.num_gpu_blocks must be >= 2 (block 0 is the null block), "
                             f"got {num_gpu_blocks}")
        self.num_gpu_blocks = num_gpu_blocks
        self.enable_caching = enable_caching
        self.ref_cnt: list[int] = [0] * num_gpu_blocks
        self.block_hash: list[int | None] = [None] * num_gpu_blocks
        # Insertion-ordered set of free block ids; front = next to allocate/evict.
        self.free_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(1, num_gpu_blocks))
        # hash -> block id, or list of ids (first inserted is the one hits use) for duplicates.
        self.cached: dict[int, int | list[int]] = {}

    @property
    def num_free_blocks(self) -> int:
        """Blocks allocatable now (free, cached-but-unreferenced included)."""
        return len(self.free_queue)

    @property
    def num_usable_blocks(self) -> int:
        """Every block but the null block."""
        return self.num_gpu_blocks - 1

    def usage(self) -> float:
        """Fraction of usable blocks referenced by requests (vLLM's kv_cache_usage)."""
        return 1.0 - len(self.free_queue) / (self.num_gpu_blocks - 1)

    def get_cached_block(self, block_hash: int) -> int | None:
        """The block holding this content, if it is still cached."""
        entry = self.cached.get(block_hash)
        if entry is None or type(entry) is int:
            return entry
        return entry[0]

    def get_new_blocks(self, num_blocks: int) -> list[int]:
        """Pop blocks from the front of the free queue, evicting their cached hash."""
        free_queue = self.free_queue
        if num_blocks > len(free_queue):
            raise ValueError(f"cannot get {num_blocks} free blocks from the pool ({len(free_queue)} free)")
        ref_cnt, block_hash, cached = self.ref_cnt, self.block_hash, self.cached
        pop = free_queue.popitem
        out = []
        for _ in range(num_blocks):
            bid = pop(last=False)[0]
            h = block_hash[bid]
            if h is not None:  # evict: the block is about to hold other content
                block_hash[bid] = None
                entry = cached.get(h)
                if entry is not None:
                    if type(entry) is int:
                        if entry == bid:
                            del cached[h]
                    elif bid in entry:
                        entry.remove(bid)
                        if not entry:
                            del cached[h]
            ref_cnt[bid] = 1
            out.append(bid)
        return out

    def touch(self, block_ids: Iterable[int]) -> None:
        """A prefix hit takes a reference, pulling unreferenced blocks out of the free queue."""
        ref_cnt = self.ref_cnt
        for bid in block_ids:
            if ref_cnt[bid] == 0:
                del self.free_queue[bid]
            ref_cnt[bid] += 1

    def free_blocks(self, ordered_block_ids: Iterable[int]) -> None:
        """Drop one reference each; first-listed blocks become the first eviction candidates."""
        ref_cnt = self.ref_cnt
        block_hash = self.block_hash
        caching = self.enable_caching
        front: list[int] = []
        back: list[int] = []
        for bid in ordered_block_ids:
            if bid == NULL_BLOCK_ID:
                continue
            ref_cnt[bid] -= 1
            if ref_cnt[bid] == 0:
                if block_hash[bid] is None or not caching:
                    front.append(bid)
                else:
                    back.append(bid)
        free_queue = self.free_queue
        for bid in reversed(front):
            free_queue[bid] = None
            free_queue.move_to_end(bid, last=False)
        if back:
            free_queue.update(dict.fromkeys(back))

    def cache_block(self, bid: int, block_hash: int) -> None:
        """Publish a full block's content hash so later requests can hit it."""
        self.cache_blocks((bid,), (block_hash,))

    def cache_blocks(self, block_ids: Iterable[int], hashes: Iterable[int]) -> None:
        """cache_block for each pair, in order (one call per published run of blocks)."""
        block_hash, cached = self.block_hash, self.cached
        for bid, h in zip(block_ids, hashes, strict=True):
            if block_hash[bid] == h:
                continue
            block_hash[bid] = h
            entry = cached.get(h)
            if entry is None:
                cached[h] = bid
            elif type(entry) is int:
                cached[h] = [entry, bid]
            else:
                entry.append(bid)

    def check_invariants(self, held: dict[int, int]) -> None:
        """free + held + null == total; ref counts equal the references `held` counts per block."""
        free = self.free_queue
        assert NULL_BLOCK_ID not in free, "null block in the free queue"
        assert len(free) + len(held) + 1 == self.num_gpu_blocks, (
            f"blocks not conserved: {len(free)} free + {len(held)} held + 1 null "
            f"!= {self.num_gpu_blocks}")
        for bid in range(1, self.num_gpu_blocks):
            want = held.get(bid, 0)
            assert self.ref_cnt[bid] == want, f"block {bid}: ref_cnt {self.ref_cnt[bid]} != {want} refs"
            assert (bid in free) == (want == 0), f"block {bid}: free-queue membership wrong"
        for h, entry in self.cached.items():
            for bid in ([entry] if type(entry) is int else entry):
                assert self.block_hash[bid] == h, f"cache map points at block {bid} with another hash"
