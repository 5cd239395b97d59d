"""BlockPool: fixed-size KV blocks, an LRU free queue and the prefix-cache hash map (vLLM's BlockPool)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

NULL_BLOCK_ID: Final = 0
# The hash of a published block whose content only its request can know, while it is not in the
# hash map (KVCacheManager's lazy_private): hash() never returns -1.
PRIVATE_HASH: Final = -1


class BlockPool:
    """Owns every block's ref count and hash; block 0 is the null block and is never handed out.

    The free queue holds every block with ref_cnt 0, cached (hashed) ones included: they stay
    reusable by prefix hits until `get_new_blocks` pops them from the front and evicts their hash.
    Freed blocks without a hash go to the front (reused first), hashed ones to the back (LRU).
    `mapped[b]`: block b's hash is in the hash map (a PRIVATE_HASH block's is not).
    As in vLLM (FreeKVCacheBlockQueue), the queue is a doubly linked list threaded through the
    block ids (`_next`/`_prev`; the null block is its sentinel: `_next[0]` is the head, `_prev[0]`
    the tail), so a prefix hit removes a block from the middle in O(1) and, compiled
    (schedsim.accel), every operation is a few native list reads and writes. The links hold the
    int objects of the block ids as they are (`Any`, `b`) next to their native values (`bid`):
    compiled, an int stored from a native value is a new object each time (ids above 256).
    """

    __slots__ = (
        "num_gpu_blocks",
        "enable_caching",
        "ref_cnt",
        "block_hash",
        "mapped",
        "cached",
        "num_free",
        "_next",
        "_prev",
    )

    def __init__(self, num_gpu_blocks: int, enable_caching: bool) -> None:
        if num_gpu_blocks < 2:
            raise ValueError(
                f"BlockPool.num_gpu_blocks must be >= 2 (block 0 is the null block), got {num_gpu_blocks}"
            )
        self.num_gpu_blocks = num_gpu_blocks
        self.enable_caching = enable_caching
        self.ref_cnt: list[int] = [0] * num_gpu_blocks
        self.block_hash: list[int | None] = [None] * num_gpu_blocks
        self.mapped: list[bool] = [False] * num_gpu_blocks
        # hash -> block id, or list of ids (first inserted is the one hits use) for duplicates.
        self.cached: dict[int, int | list[int]] = {}
        # free queue 1, 2, ..., n - 1 (front = next to allocate/evict)
        self._next: list[Any] = list(range(1, num_gpu_blocks)) + [0]
        self._prev: list[Any] = [num_gpu_blocks - 1] + list(range(num_gpu_blocks - 1))
        self.num_free = num_gpu_blocks - 1

    @property
    def num_free_blocks(self) -> int:
        """Blocks allocatable now (free, cached-but-unreferenced included)."""
        return self.num_free

    @property
    def num_usable_blocks(self) -> int:
        """Every block but the null block."""
        return self.num_gpu_blocks - 1

    @property
    def free_queue(self) -> list[int]:
        """The free blocks in queue order, front first (a snapshot, for tests and inspection)."""
        nxt = self._next
        out: list[int] = []
        bid = nxt[0]
        while bid != NULL_BLOCK_ID:
            out.append(bid)
            bid = nxt[bid]
        return out

    def usage(self) -> float:
        """Fraction of usable blocks referenced by requests (vLLM's kv_cache_usage)."""
        return 1.0 - self.num_free / (self.num_gpu_blocks - 1)

    def get_cached_block(self, block_hash: int) -> int | None:
        """The block holding this content, if it is still cached."""
        entry = self.cached.get(block_hash)
        if entry is None or isinstance(entry, int):
            return entry
        return entry[0]

    def get_new_blocks(self, num_blocks: int) -> list[int]:
        """Pop blocks from the front of the free queue, evicting their cached hash."""
        if num_blocks > self.num_free:
            raise ValueError(f"cannot get {num_blocks} free blocks from the pool ({self.num_free} free)")
        ref_cnt, block_hash, nxt, prev = self.ref_cnt, self.block_hash, self._next, self._prev
        mapped = self.mapped
        out: list[Any] = []
        b: Any = nxt[0]
        for _i in range(num_blocks):
            bid: int = b
            h = block_hash[bid]
            if h is not None:  # evict: the block is about to hold other content
                block_hash[bid] = None
                if mapped[bid]:
                    mapped[bid] = False
                    self._uncache(h, bid)
            ref_cnt[bid] = 1
            out.append(b)
            b = nxt[bid]
        nxt[0] = b  # the blocks before `b` left the queue at its front
        first: int = b
        prev[first] = NULL_BLOCK_ID
        self.num_free -= num_blocks
        return out

    def _uncache(self, h: int, bid: int) -> None:
        """Drop block `bid` from the hash map's entry for `h`."""
        cached = self.cached
        entry = cached.get(h)
        if entry is None:
            return
        if isinstance(entry, int):
            if entry == bid:
                del cached[h]
        elif bid in entry:
            entry.remove(bid)
            if not entry:
                del cached[h]

    def touch(self, block_ids: Iterable[int]) -> None:
        """A prefix hit takes a reference, pulling unreferenced blocks out of the free queue."""
        ref_cnt, nxt, prev = self.ref_cnt, self._next, self._prev
        for bid in block_ids:
            if ref_cnt[bid] == 0:
                p, n = prev[bid], nxt[bid]
                nxt[p] = n
                prev[n] = p
                self.num_free -= 1
            ref_cnt[bid] += 1

    def free_table(self, blocks: list[int]) -> None:
        """free_blocks over a request's block table tail first, so its tail is evicted first."""
        self.free_blocks(blocks[::-1])

    def free_blocks(self, ordered_block_ids: Iterable[Any]) -> None:
        """Drop one reference each; first-listed blocks become the first eviction candidates."""
        ref_cnt, block_hash, nxt, prev = self.ref_cnt, self.block_hash, self._next, self._prev
        caching = self.enable_caching
        front: list[Any] = []
        tail: Any = prev[0]
        t: int = tail
        freed = 0
        for b in ordered_block_ids:
            bid: int = b
            if bid == NULL_BLOCK_ID:
                continue
            c = ref_cnt[bid] - 1
            ref_cnt[bid] = c
            if c == 0:
                freed += 1
                if block_hash[bid] is None or not caching:
                    front.append(b)
                else:  # to the back, in order
                    nxt[t] = b
                    prev[bid] = tail
                    tail, t = b, bid
        nxt[t] = NULL_BLOCK_ID
        prev[0] = tail
        head: Any = nxt[0]
        for j in range(len(front) - 1, -1, -1):  # to the front, first-listed first
            f = front[j]
            fi: int = f
            hi: int = head
            nxt[fi] = head
            prev[hi] = f
            head = f
        nxt[0] = head
        hi = head
        prev[hi] = NULL_BLOCK_ID
        self.num_free += freed

    def cache_block(self, bid: int, block_hash: int) -> None:
        """Publish a full block's content hash so later requests can hit it."""
        self.cache_blocks([bid], [block_hash])

    def cache_blocks(self, block_ids: list[int], hashes: list[int]) -> None:
        """cache_block for each pair, in order (one call per published run of blocks)."""
        if len(block_ids) != len(hashes):
            raise ValueError(f"cache_blocks: {len(block_ids)} blocks but {len(hashes)} hashes")
        block_hash, cached, mapped = self.block_hash, self.cached, self.mapped
        for i in range(len(block_ids)):
            b: Any = block_ids[i]  # stored as the objects they are (an int read is boxed anew)
            h: Any = hashes[i]
            bid: int = b
            if block_hash[bid] == h:
                continue
            block_hash[bid] = h
            mapped[bid] = True
            entry = cached.get(h)
            if entry is None:
                cached[h] = b
            elif isinstance(entry, int):
                cached[h] = [entry, b]
            else:
                entry.append(b)

    def mark_private(self, block_ids: list[int]) -> None:
        """Publish blocks whose content only their request can know, outside the hash map: they
        count as cached (freed to the back of the queue) but nobody can hit them (yet)."""
        block_hash = self.block_hash
        for bid in block_ids:
            if block_hash[bid] is None:
                block_hash[bid] = PRIVATE_HASH

    def check_invariants(self, held: dict[int, int]) -> None:
        """free + held + null == total; ref counts equal the references `held` counts per block."""
        order = self.free_queue
        free = set(order)
        assert len(free) == len(order) == self.num_free, (
            f"free queue corrupt: {len(order)} linked, {len(free)} distinct, {self.num_free} counted"
        )
        assert NULL_BLOCK_ID not in free, "null block in the free queue"
        assert len(free) + len(held) + 1 == self.num_gpu_blocks, (
            f"blocks not conserved: {len(free)} free + {len(held)} held + 1 null != {self.num_gpu_blocks}"
        )
        nxt, prev = self._next, self._prev
        assert prev[0] == (order[-1] if order else 0), "free queue tail link wrong"
        for a, b in zip([0, *order], [*order, 0], strict=True):
            assert nxt[a] == b and prev[b] == a, f"free queue links {a} <-> {b} broken"
        for bid in range(1, self.num_gpu_blocks):
            want = held.get(bid, 0)
            assert self.ref_cnt[bid] == want, f"block {bid}: ref_cnt {self.ref_cnt[bid]} != {want} refs"
            assert (bid in free) == (want == 0), f"block {bid}: free-queue membership wrong"
        in_map = 0
        for h, entry in self.cached.items():
            for bid in [entry] if isinstance(entry, int) else entry:
                assert self.block_hash[bid] == h, f"cache map points at block {bid} with another hash"
                assert self.mapped[bid], f"block {bid} is in the hash map but not marked mapped"
                in_map += 1
        assert in_map == sum(self.mapped), "a block marked mapped is not in the hash map"
