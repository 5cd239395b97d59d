"""KVCacheManager: per-request block tables over a BlockPool, with prefix caching and fenced frees.

Semantics follow vLLM 0.33.0's KVCacheManager for one full-attention group with hash block size
== block size: hits are whole cached blocks, capped at num_tokens - 1; `allocate_slots` fails
(returns None) instead of allocating partially; `full_sequence_must_fit` is the admission gate of
`scheduler_reserve_full_isl` (the whole known sequence, prompt plus outputs, must fit now).

Lazy private publication (`lazy_private`, the vLLM policies): a block whose content only its
request can know (`hashing.private_from`: a prompt known only by its length, and everything after
it) can only ever be hit by that request, and a vLLM request looks its blocks up only while it
holds none (waiting, after a preemption). Such blocks are published without a hash
(`BlockPool.mark_private`: cached for the free queue's order, outside the hash map) and enter the
map with their real hashes when a request that is not finished frees them; a finished request's
never do. Every lookup answers as if they had been published eagerly, without hashing and mapping
~90 blocks per request that nobody will look up. Policies that look up blocks their requests hold
(TensorRT-LLM's prefix-reuse estimate) keep eager publication.

Deferred free (vLLM's defer_block_free): a policy that keeps several steps in flight stamps each
non-empty step with `begin_step()` and each processed one with `end_step()`; `free(request,
last_sched_seq)` then keeps the blocks out of the pool until the step that last wrote them is done.
"""

from __future__ import annotations

from collections import deque

from ..request import Request, RequestStatus
from .block_pool import BlockPool
from .hashing import ensure_block_hashes, private_from


def cdiv(a: int, b: int) -> int:
    """Ceiling division."""
    return -(-a // b)


class KVCacheManager:
    """Block tables, prefix-cache lookups and allocation for one policy."""

    __slots__ = (
        "block_size",
        "max_model_len",
        "enable_caching",
        "watermark_blocks",
        "pool",
        "req_to_blocks",
        "num_cached_block",
        "deferred_frees",
        "sched_step_seq",
        "processed_step_seq",
        "lazy_private",
    )

    def __init__(
        self,
        num_gpu_blocks: int,
        block_size: int,
        max_model_len: int,
        enable_caching: bool = True,
        watermark: float = 0.0,
        lazy_private: bool = False,
    ) -> None:
        if block_size < 1:
            raise ValueError(f"KVCacheManager.block_size must be >= 1, got {block_size}")
        if not 0.0 <= watermark < 1.0:
            raise ValueError(f"KVCacheManager.watermark must be in [0, 1), got {watermark}")
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.enable_caching = enable_caching
        self.watermark_blocks = int(watermark * num_gpu_blocks)
        self.pool = BlockPool(num_gpu_blocks, enable_caching)
        self.req_to_blocks: dict[str, list[int]] = {}
        self.num_cached_block: dict[str, int] = {}
        self.deferred_frees: deque[tuple[int, list[int]]] = deque()
        self.sched_step_seq = 0
        self.processed_step_seq = 0
        self.lazy_private = lazy_private

    # ---- queries ----
    @property
    def num_free_blocks(self) -> int:
        """Blocks allocatable now."""
        return self.pool.num_free_blocks

    @property
    def usage(self) -> float:
        """Fraction of usable blocks in use (deferred-free blocks count as used)."""
        return self.pool.usage()

    def get_block_ids(self, request_id: str) -> list[int]:
        """The request's block table (live list: copy it to keep it)."""
        blocks = self.req_to_blocks.get(request_id)
        return [] if blocks is None else blocks

    def get_computed_blocks(self, request: Request) -> tuple[list[int], int]:
        """Longest run of cached full blocks from the start, capped at num_tokens - 1 tokens."""
        if not self.enable_caching:
            return [], 0
        bs = self.block_size
        max_blocks = (request.num_tokens - 1) // bs
        if max_blocks <= 0:
            return [], 0
        if self.lazy_private:  # private hashes are known (and mapped) only after a preemption
            ensure_block_hashes(request, min(max_blocks, private_from(request, bs)), bs)
            hashes = request.block_hashes
        else:
            hashes = ensure_block_hashes(request, max_blocks, bs)
        pool = self.pool  # (compiled: a native call each, where a bound method is a generic one)
        hit: list[int] = []
        for i in range(min(max_blocks, len(hashes))):
            bid = pool.get_cached_block(hashes[i])
            if bid is None:
                break
            hit.append(bid)
        return hit, len(hit) * bs

    def _num_blocks_to_allocate(
        self, request_id: str, num_tokens: int, num_hit: int, num_evictable: int
    ) -> int:
        """New blocks to take from the pool, counting the `num_evictable` hit blocks (of `num_hit`)
        that must leave the free queue."""
        held = len(self.req_to_blocks.get(request_id, ()))
        need = cdiv(num_tokens, self.block_size) - num_hit - held
        return (need if need > 0 else 0) + num_evictable

    def num_evictable(self, hit: list[int]) -> int:
        """Hit blocks nobody references: adopting them takes them out of the free queue."""
        ref_cnt = self.pool.ref_cnt
        n = 0
        for b in hit:
            if ref_cnt[b] == 0:
                n += 1
        return n

    def fits(
        self,
        request: Request,
        need_slot: int,
        num_hit: int,
        num_evictable: int,
        full_sequence_must_fit: bool,
        has_scheduled_reqs: bool,
        free: int,
        reserved_blocks: int = 0,
    ) -> bool:
        """allocate_slots' admission test against `free` blocks (slots up to `need_slot`, the first
        `num_hit` prefix hits adopted, `num_evictable` of them unreferenced, `reserved_blocks` left
        to others): a caller may ask it of a free count other than today's, or of a shorter hit."""
        rid = request.request_id
        watermark = 0
        if has_scheduled_reqs and request.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED):
            watermark = self.watermark_blocks
        if full_sequence_must_fit:
            full = min(request.num_tokens, self.max_model_len)
            if self._num_blocks_to_allocate(rid, full, num_hit, num_evictable) + watermark > free:
                return False
        need = self._num_blocks_to_allocate(rid, need_slot, num_hit, num_evictable)
        return need + watermark <= free - reserved_blocks

    # ---- allocation ----
    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: list[int] | None = None,
        num_lookahead_tokens: int = 0,
        full_sequence_must_fit: bool = False,
        has_scheduled_reqs: bool = True,
        num_external_computed_tokens: int = 0,
        delay_cache_blocks: bool = False,
        reserved_blocks: int = 0,
    ) -> list[int] | None:
        """Give the request slots for `num_new_tokens` more tokens (plus adopted prefix hits and
        `num_external_computed_tokens` a KV connector loads; `delay_cache_blocks`: publish nothing
        until the load has landed; `reserved_blocks`: free blocks to leave for others).

        Returns the newly allocated block ids, or None (nothing changed) if the pool is too small.
        """
        rid = request.request_id
        blocks = self.req_to_blocks.get(rid)
        if (
            blocks is not None
            and not new_computed_blocks
            and not full_sequence_must_fit
            and not num_external_computed_tokens
            and not reserved_blocks
        ):
            return self._extend(request, blocks, num_new_tokens, num_lookahead_tokens, has_scheduled_reqs)
        if num_new_tokens == 0 and num_new_computed_tokens == 0 and num_external_computed_tokens == 0:
            raise ValueError("num_new_tokens must be > 0 when there are no computed tokens to adopt")
        hit = new_computed_blocks or []
        num_local_computed = request.num_computed_tokens + num_new_computed_tokens
        total_computed = min(num_local_computed + num_external_computed_tokens, self.max_model_len)
        need_slot = min(total_computed + num_new_tokens + num_lookahead_tokens, self.max_model_len)
        free, must_fit = self.pool.num_free_blocks, full_sequence_must_fit
        evictable = self.num_evictable(hit)
        if not self.fits(
            request, need_slot, len(hit), evictable, must_fit, has_scheduled_reqs, free, reserved_blocks
        ):
            return None
        if blocks is None:
            blocks = self.req_to_blocks[rid] = []
        if hit:
            self.pool.touch(hit)
            blocks.extend(hit)
            self.num_cached_block[rid] = len(blocks)
        num_new_blocks = cdiv(need_slot, self.block_size) - len(blocks)
        new_blocks = self.pool.get_new_blocks(num_new_blocks) if num_new_blocks > 0 else []
        blocks.extend(new_blocks)
        if self.enable_caching and not delay_cache_blocks:
            self.cache_blocks(request, min(total_computed + num_new_tokens, request.num_tokens))
        return new_blocks

    def _extend(
        self,
        request: Request,
        blocks: list[int],
        num_new_tokens: int,
        num_lookahead_tokens: int,
        has_scheduled_reqs: bool,
    ) -> list[int] | None:
        """Fast path of allocate_slots for a request that already holds blocks and adopts no hits."""
        if num_new_tokens <= 0:
            raise ValueError("num_new_tokens must be > 0 when there are no computed tokens to adopt")
        computed = request.num_computed_tokens
        total = computed + num_new_tokens
        need_slot = total + num_lookahead_tokens
        if need_slot > self.max_model_len:
            need_slot = self.max_model_len
        need = -(-need_slot // self.block_size) - len(blocks)
        watermark = (
            self.watermark_blocks
            if has_scheduled_reqs
            and (request.status == RequestStatus.WAITING or request.status == RequestStatus.PREEMPTED)
            else 0
        )
        if need > 0:
            if need + watermark > self.pool.num_free:
                return None
            new_blocks = self.pool.get_new_blocks(need)
            blocks.extend(new_blocks)
        else:
            if watermark > self.pool.num_free:
                return None
            new_blocks = []
        if self.enable_caching:
            if computed > self.max_model_len:
                total = self.max_model_len + num_new_tokens
            n = request.prompt_len + len(request.output_token_ids)
            if total // self.block_size > self.num_cached_block.get(request.request_id, 0):
                self.cache_blocks(request, total if total < n else n)
        return new_blocks

    def holds_new_tokens(self, request_id: str, total: int, known: int) -> bool:
        """append_slots would do nothing: the request's blocks already hold `total` tokens and no
        new full block of its first `known` tokens is to be cached (schedule()'s fast path)."""
        blocks = self.req_to_blocks.get(request_id)
        if blocks is None:
            return False
        bs = self.block_size
        # cdiv(min(total, max_model_len), bs) <= len(blocks), without a division
        if (total if total < self.max_model_len else self.max_model_len) > len(blocks) * bs:
            return False
        if not self.enable_caching:
            return True
        # min(total, known) // bs <= num_cached, without a division
        num_cached = self.num_cached_block.get(request_id)
        return (total if total < known else known) < ((num_cached if num_cached is not None else 0) + 1) * bs

    def append_slots(self, request: Request, num_new_tokens: int) -> bool:
        """Fast allocate_slots for a running request (no hits, no lookahead, no watermark).

        Returns False where the full allocate_slots must decide (no blocks yet, or too few free).
        """
        blocks = self.req_to_blocks.get(request.request_id)
        if blocks is None:
            return False
        total = request.num_computed_tokens + num_new_tokens
        need_slot = total if total < self.max_model_len else self.max_model_len
        need = -(-need_slot // self.block_size) - len(blocks)
        if need > 0:
            if need > self.pool.num_free:
                return False
            blocks.extend(self.pool.get_new_blocks(need))
        if self.enable_caching:
            n = request.prompt_len + len(request.output_token_ids)
            if total > n:
                total = n
            if total // self.block_size > self.num_cached_block.get(request.request_id, 0):
                self.cache_blocks(request, total)
        return True

    def cache_blocks(self, request: Request, num_computed_tokens: int) -> None:
        """Publish the request's full, finalized blocks (up to num_computed_tokens) to the cache."""
        if not self.enable_caching:
            return
        rid = request.request_id
        num_cached = self.num_cached_block.get(rid, 0)
        bs = self.block_size
        num_full = num_computed_tokens // bs
        if num_full <= num_cached:
            return
        if self.lazy_private:
            split = private_from(request, bs)
            if split < num_full:
                num_full = min(num_full, request.num_tokens // bs)  # as ensure_block_hashes caps
                if num_full <= num_cached:
                    return
                table = self.req_to_blocks[rid]
                if num_cached < split:
                    hashes = ensure_block_hashes(request, split, bs)
                    self.pool.cache_blocks(table[num_cached:split], hashes[num_cached:split])
                self.pool.mark_private(table[max(num_cached, split) : num_full])
                self.num_cached_block[rid] = num_full
                return
        hashes = ensure_block_hashes(request, num_full, bs)
        num_full = min(num_full, len(hashes))
        if num_full <= num_cached:
            return
        self.pool.cache_blocks(self.req_to_blocks[rid][num_cached:num_full], hashes[num_cached:num_full])
        self.num_cached_block[rid] = num_full

    # ---- freeing ----
    def pop_blocks_for_free(self, request: Request) -> list[int]:
        """Detach the request's blocks without returning them to the pool."""
        self.num_cached_block.pop(request.request_id, None)
        return self.req_to_blocks.pop(request.request_id, [])

    def can_free_now(self, last_sched_seq: int) -> bool:
        """No in-flight step can still write blocks last scheduled at `last_sched_seq`."""
        return last_sched_seq <= self.processed_step_seq

    def free(self, request: Request, last_sched_seq: int | None = None) -> None:
        """Return the request's blocks (tail first, so tails are evicted first).

        With `last_sched_seq` newer than the last processed step, the blocks wait in the deferred
        queue, fenced by the newest scheduled step, until `end_step` passes that fence.
        """
        if self.lazy_private and not request.is_finished:
            self._map_private(request)  # it may come back and hit them
        blocks = self.pop_blocks_for_free(request)
        if last_sched_seq is not None and last_sched_seq > self.processed_step_seq:
            if blocks:
                self.deferred_frees.append((self.sched_step_seq, blocks))
            return
        if blocks:
            self.pool.free_table(blocks)

    def _map_private(self, request: Request) -> None:
        """Hash the request's published private blocks and put them in the hash map."""
        rid = request.request_id
        num_cached = self.num_cached_block.get(rid, 0)
        split = private_from(request, self.block_size)
        if num_cached <= split:
            return
        hashes = ensure_block_hashes(request, num_cached, self.block_size)
        self.pool.cache_blocks(self.req_to_blocks[rid][split:num_cached], hashes[split:num_cached])

    def drop_request(self, request: Request) -> None:
        """Forget a finished request's hashes (memory: long traces)."""
        request.block_hashes = []

    def begin_step(self) -> int:
        """Stamp a newly scheduled non-empty step; returns its fence sequence number."""
        self.sched_step_seq += 1
        return self.sched_step_seq

    def end_step(self) -> None:
        """A non-empty step finished: release deferred blocks whose fence it passed."""
        self.processed_step_seq += 1
        dq = self.deferred_frees
        while dq and dq[0][0] <= self.processed_step_seq:
            _, blocks = dq.popleft()
            self.pool.free_table(blocks)

    @property
    def num_deferred_blocks(self) -> int:
        """Blocks freed by requests but still fenced by in-flight steps."""
        return sum(len(b) for _, b in self.deferred_frees)

    def check_invariants(self) -> None:
        """Every block is free, held (ref count == references) or the null block."""
        held: dict[int, int] = {}
        for table in self.req_to_blocks.values():
            for bid in table:
                held[bid] = held.get(bid, 0) + 1
        for _, blocks in self.deferred_frees:
            for bid in blocks:
                held[bid] = held.get(bid, 0) + 1
        held.pop(0, None)
        self.pool.check_invariants(held)
        for rid, n in self.num_cached_block.items():
            assert n <= len(self.req_to_blocks.get(rid, ())), f"{rid}: more cached than held blocks"
