"""SGLang's KV memory path: the page allocator, the request rows and the radix tree, together.

The calls are SGLang 0.5.23's (`mem_cache/common.py`, `mem_cache/allocation.py`,
`UnifiedRadixCache.checkpoint`), in its order:

- `match_kv_cache`: look a request's tokens up in the tree (SGLang caps the admission lookup at
  `len - 1` tokens; lpm's and fcfs's queue lookups are uncapped); the hit becomes its prefix.
- `checkpoint_kv_cache`: insert what a request has computed so far (`up_to` tokens, page
  aligned), point its row at the tree's blocks where the tree already had them (its own
  duplicates are freed), split the leaf at the prompt boundary when outputs were inserted too,
  and move the request's lock to the node the insert ended on.
- `release_kv_cache`: optionally checkpoint first (a finish), then free the row (everything the
  tree does not also hold) and drop the lock. A retraction releases without a checkpoint.
- `evict_from_tree_cache(n)`: evict tree leaves until `n` tokens are free (`evict_to_free_tokens`).
- `alloc_for_extend` / `alloc_for_decode`: evict first (page 1: exactly the tokens; larger
  pages: SGLang's over-estimate of one extra page per request), then give each request's row
  its new pages.

The allocator is a `KVCacheManager` without vLLM's hash cache: its block pool is SGLang's page
pool (a page is a block, `available_size` = free blocks x page size) and its block tables are the
request rows (`req_to_token`). The tree and the rows both hold references on shared blocks.
"""

from __future__ import annotations

from ..kv_cache import KVCacheManager, ensure_block_hashes
from ..request import Request
from .radix_cache import RadixCache, TreeNode, Unit


class ReqKvInfo:
    """A running request's tree state (SGLang's `Req.prefix_len`, `last_node`, `lock` and
    `kv.cache_protected_len`): the prefix this round starts from, and the locked node whose
    path its row shares with the tree."""

    def __init__(self) -> None:
        self.prefix_len = 0
        self.last_node: TreeNode | None = None
        self.lock: TreeNode | None = None
        self.cache_protected_len = 0


def radix_key(req: Request, num_tokens: int, page_size: int) -> list[Unit]:
    """The tree key of a request's first `num_tokens` tokens (prompt, then outputs), page aligned:
    token ids at page size 1, else one chained content hash per page (`ensure_block_hashes`; the
    request's own list where it holds exactly those pages: the tree only reads a key and copies
    what it keeps)."""
    n = num_tokens // page_size
    ids = req.prompt_token_ids
    if page_size == 1 and ids is not None:
        if n <= len(ids):
            return ids[:n]
        return ids + req.output_token_ids[: n - len(ids)]
    hashes = ensure_block_hashes(req, n, page_size)
    return hashes if len(hashes) == n else hashes[:n]


class MemCache:
    """The allocator (`kv`), the tree and each request's tree state; see the module docstring."""

    def __init__(self, kv: KVCacheManager, page_size: int, enable_radix_cache: bool) -> None:
        self.kv = kv
        self.page_size = page_size
        self.tree_cache = RadixCache(page_size, kv.pool, disable=not enable_radix_cache)
        self.req_kv: dict[str, ReqKvInfo] = {}

    # ---- sizes ----
    def available_size(self) -> int:
        """Free tokens in the pool (whole free pages)."""
        return self.kv.num_free_blocks * self.page_size

    def evictable_size(self) -> int:
        """Tokens the tree could give back."""
        return self.tree_cache.evictable_size()

    def info(self, req: Request) -> ReqKvInfo:
        """The request's tree state (created on first use)."""
        st = self.req_kv.get(req.request_id)
        if st is None:
            st = self.req_kv[req.request_id] = ReqKvInfo()
        return st

    # ---- lookups ----
    def match_kv_cache(self, req: Request, max_prefix_len: int | None = None) -> int:
        """Match the request's prompt and outputs (capped at `max_prefix_len` tokens) and adopt
        the hit as its prefix; returns the prefix length in tokens."""
        n = req.num_tokens if max_prefix_len is None else min(req.num_tokens, max_prefix_len)
        units, node = self.tree_cache.match_prefix(radix_key(req, n, self.page_size))
        st = self.info(req)
        st.prefix_len = units * self.page_size
        st.last_node = node
        return st.prefix_len

    def peek_kv_cache(self, req: Request, max_prefix_len: int) -> tuple[int, int]:
        """`match_kv_cache`'s prefix length, and the tokens a lock on it would take from the
        evictable, changing nothing (fast-forward's look at the queue's head)."""
        n = min(req.num_tokens, max_prefix_len)
        units, unlocked = self.tree_cache.peek_prefix(radix_key(req, n, self.page_size))
        return units * self.page_size, unlocked * self.page_size

    def touch_prefix(self, req: Request) -> None:
        """A lookup only for its recency refresh (fcfs's waiting-prefix refresh)."""
        self.tree_cache.match_prefix(radix_key(req, req.num_tokens, self.page_size))

    # ---- insertion ----
    def checkpoint_kv_cache(self, req: Request, up_to: int) -> None:
        """Insert the request's first `up_to` computed tokens and share the tree's blocks."""
        tree = self.tree_cache
        st = self.info(req)
        if tree.disable:
            return
        page = self.page_size
        key = radix_key(req, up_to, page)
        row = self.kv.req_to_blocks[req.request_id]
        _, node = tree.insert(key, row)
        prompt_units = req.prompt_len // page
        if 0 < prompt_units < len(key):  # split the leaf at the prompt: outputs evict first
            tree.insert(key[:prompt_units], row)
        shared = tree.path_value(node)
        start = st.cache_protected_len // page
        olds = [row[p] for p in range(start, len(shared)) if row[p] != shared[p]]
        if olds:
            news = [shared[p] for p in range(start, len(shared)) if row[p] != shared[p]]
            self.kv.pool.touch(news)
            for p in range(start, len(shared)):
                row[p] = shared[p]
            self.kv.pool.free_blocks(olds)
        if st.lock is not None:
            tree.unlock(st.lock)
        tree.lock(node)
        st.lock = node
        st.last_node = node
        st.cache_protected_len = len(shared) * page

    def lock_prefix(self, req: Request) -> None:
        """Admission: lock the matched prefix for as long as the request runs."""
        st = self.info(req)
        node = st.last_node
        assert node is not None and st.lock is None, f"{req.request_id}: no match to lock"
        self.tree_cache.lock(node)
        st.lock = node
        st.cache_protected_len = st.prefix_len

    def release_lock(self, req: Request) -> None:
        """A request that was not admitted after all gives its prefix lock back."""
        st = self.info(req)
        if st.lock is not None:
            self.tree_cache.unlock(st.lock)
            st.lock = None
        st.cache_protected_len = 0

    # ---- release ----
    def release_kv_cache(self, req: Request, checkpoint: bool) -> None:
        """Give the row back (inserting what the tree can key first, on a finish) and unlock."""
        rid = req.request_id
        if checkpoint and rid in self.kv.req_to_blocks:
            self.checkpoint_kv_cache(req, min(req.num_computed_tokens, req.num_tokens))
        self.kv.free(req)
        st = self.req_kv.pop(rid, None)
        if st is not None and st.lock is not None:
            self.tree_cache.unlock(st.lock)

    # ---- eviction and allocation ----
    def evict_from_tree_cache(self, num_tokens: int) -> None:
        """Evict tree leaves until `num_tokens` tokens are free (or nothing is evictable)."""
        shortfall = num_tokens - self.available_size()
        if shortfall > 0:
            self.tree_cache.evict(shortfall)

    def new_tokens_required_next_decode(self, reqs: list[Request]) -> int:
        """Tokens of the new pages a decode of these requests takes (page-aligned lengths)."""
        page = self.page_size
        return sum(page for r in reqs if r.num_computed_tokens % page == 0)

    def check_decode_mem(self, reqs: list[Request]) -> bool:
        """Whether the next decode of `reqs` fits after evicting what it lacks."""
        need = self.new_tokens_required_next_decode(reqs)
        self.evict_from_tree_cache(need)
        return self.available_size() >= need

    def alloc_for_extend(self, reqs: list[Request], extend_lens: list[int]) -> None:
        """Evict for the batch, then give each request its prefix (tree blocks) and new pages."""
        page = self.page_size
        demand = sum(extend_lens) + (len(reqs) * page if page > 1 else 0)
        self.evict_from_tree_cache(demand)
        kv = self.kv
        for req, n in zip(reqs, extend_lens, strict=True):
            if req.request_id in kv.req_to_blocks:  # a continuing chunk
                got = kv.allocate_slots(req, n, has_scheduled_reqs=False)
            else:
                st = self.info(req)
                assert st.last_node is not None
                hit = self.tree_cache.path_value(st.last_node) if st.prefix_len else []
                got = kv.allocate_slots(req, n, st.prefix_len, hit or None, has_scheduled_reqs=False)
                req.num_computed_tokens += st.prefix_len
            if got is None:
                raise AssertionError(
                    f"sglang: prefill of {req.request_id} out of memory after the admission budget allowed it"
                )

    def alloc_for_decode(self, reqs: list[Request]) -> None:
        """Evict for one token per request (a page each at page size > 1), then give a new page
        to each request whose row is full (the others' rows already hold the token's slot)."""
        self.evict_from_tree_cache(len(reqs) * self.page_size)
        kv, page = self.kv, self.page_size
        rows = kv.req_to_blocks
        for req in reqs:
            row = rows.get(req.request_id)
            if row is not None and len(row) * page > req.num_computed_tokens:
                continue
            if kv.allocate_slots(req, 1, has_scheduled_reqs=False) is None:
                raise AssertionError(f"sglang: decode of {req.request_id} did not fit after the check")

    # ---- usage and checks ----
    def token_usage(self) -> float:
        """SGLang's token usage: pages neither free nor evictable, over the pool."""
        usable = self.kv.pool.num_usable_blocks
        return (usable - self.kv.num_free_blocks - self.tree_cache.evictable_units) / usable

    def check_invariants(self) -> None:
        """Every block's references are the rows' plus the tree's; locks are the requests' own;
        each locked request's row starts with its locked path's blocks."""
        kv, tree = self.kv, self.tree_cache
        held = tree.held_blocks()
        for table in kv.req_to_blocks.values():
            for bid in table:
                held[bid] = held.get(bid, 0) + 1
        held.pop(0, None)
        kv.pool.check_invariants(held)
        locks: dict[int, int] = {}
        for rid, st in self.req_kv.items():
            if st.lock is None:
                continue
            locks[st.lock.node_id] = locks.get(st.lock.node_id, 0) + 1
            row = kv.req_to_blocks.get(rid, [])
            shared = tree.path_value(st.lock)
            assert st.cache_protected_len == len(shared) * self.page_size, (
                f"{rid}: protected {st.cache_protected_len} != locked path {len(shared)} pages"
            )
            assert row[: len(shared)] == shared, f"{rid}: row does not start with its locked path"
        if not tree.disable:
            tree.check_invariants(locks)
