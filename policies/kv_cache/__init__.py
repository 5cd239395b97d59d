"""Paged KV block manager shared by every policy (vLLM's BlockPool + KVCacheManager semantics).

API (all block ids are ints; block 0 is the null block, usable blocks = num_gpu_blocks - 1):

- ``KVCacheManager(num_gpu_blocks, block_size, max_model_len, enable_caching=True, watermark=0.0)``
- ``get_computed_blocks(request) -> (hit_block_ids, num_hit_tokens)``: prefix-cache hit, whole
  blocks only, capped at ``request.num_tokens - 1``; takes no reference.
- ``allocate_slots(request, num_new_tokens, num_new_computed_tokens=0, new_computed_blocks=None,
  num_lookahead_tokens=0, full_sequence_must_fit=False, has_scheduled_reqs=True)
  -> list[int] | None``: adopt the hit blocks and allocate slots for
  ``request.num_computed_tokens + hits + num_new_tokens (+ lookahead)`` tokens, or return None
  and change nothing. Caches the request's full finalized blocks.
- ``cache_blocks(request, num_computed_tokens)``: publish more full blocks (after outputs arrive).
- ``free(request, last_sched_seq=None)``: release the table tail-first; deferred while a step
  stamped after ``processed_step_seq`` may still write it (see ``begin_step`` / ``end_step``).
- ``pop_blocks_for_free``, ``get_block_ids``, ``num_free_blocks``, ``usage``,
  ``num_deferred_blocks``, ``drop_request`` (forget hashes), ``check_invariants``.
- ``ensure_block_hashes(request, n, block_size)``: chained block hashes for requests with token
  ids, or with only ``prompt_len`` + optional ``prompt_block_hashes``.
"""

from .block_pool import NULL_BLOCK_ID, BlockPool
from .hashing import ensure_block_hashes
from .manager import KVCacheManager, cdiv

__all__ = ["NULL_BLOCK_ID", "BlockPool", "KVCacheManager", "cdiv", "ensure_block_hashes"]
