"""SGLang's cache-aware `lpm` schedule policy: longest prefix match first, with in-batch dedup.

`SchedulePolicy.calc_priority` (schedule_policy.py): each waiting request is matched against the
cache; one whose cached prefix is short (<= 32 tokens) is also matched against a scratch tree of
the waiting requests seen so far: if it shares >= 32 tokens with one of them it is deprioritised
(so only one of several requests with a common uncached prefix runs first and the rest then hit
the cache), else it is inserted. The queue is then stably sorted by matched length, longest first.
Above 128 waiting requests the matching is skipped (FCFS). Our "trees" are sets of chained block
hashes, so matches are whole blocks.
"""

from __future__ import annotations

from ..kv_cache import KVCacheManager, ensure_block_hashes
from ..request import Request

IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD = 32
IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD = 32
WAITING_QUEUE_PREFIX_MATCH_MAX = 128


def _leading_hits(hashes: list[int], seen: set[int]) -> int:
    """Blocks of a chained-hash prefix already in `seen`."""
    n = 0
    for h in hashes:
        if h not in seen:
            break
        n += 1
    return n


def sort_longest_prefix_first(waiting: list[Request], kv: KVCacheManager, block_size: int) -> list[Request]:
    """The waiting queue in LPM order (a new list; FCFS order when the queue is long)."""
    if len(waiting) > WAITING_QUEUE_PREFIX_MATCH_MAX or not kv.enable_caching:
        return list(waiting)
    seen: set[int] = set()
    keys: dict[int, float] = {}
    for req in waiting:
        _, hit = kv.get_computed_blocks(req)
        key = float(-hit)
        if hit <= IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD:
            hashes = ensure_block_hashes(req, req.num_tokens // block_size, block_size)
            shared = _leading_hits(hashes, seen) * block_size
            if shared >= IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD:
                key = float("inf")
            else:
                seen.update(hashes)
        keys[id(req)] = key
    return sorted(waiting, key=lambda r: keys[id(r)])
