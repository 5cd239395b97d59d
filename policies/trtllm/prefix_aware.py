"""Prefix-aware skipping (beneficialToSkip): defer a context whose first new block someone computes now.

A request registers its first new block only once admitted (the seed's rule and the newer C++
capacityScheduler.cpp; TensorRT-LLM's Python port at 002f3cc registers at check time). Registering
at check time would defer duplicates on behalf of a contributor the budget then rejects, and in
max-utilization it would make a request skip itself on the retry after a pause.
"""

from __future__ import annotations

from collections.abc import Iterable

from .kv_accounting import KvAccounting
from .kv_cache_manager import NO_REUSE, PrefixReuseSummary
from .state import LlmRequest


class PrefixSkipper:
    """One scheduling round's contributed-block set and per-request prefix summaries."""

    def __init__(self, acct: KvAccounting, prefix_aware: bool, skipping: bool) -> None:
        """`prefix_aware`: enable_prefix_aware_scheduling; `skipping`: also defer duplicates this round.

        With prefix-aware scheduling off, a first chunk's summary is the empty one: no reuse credit
        in the block budgets nor in the micro-batch's token estimate (addSequence still reuses).
        """
        self.acct = acct
        self.prefix_aware = prefix_aware
        self.skipping = skipping and prefix_aware and acct.kv.enable_block_reuse
        self.contributed: set[object] = set()
        self._cache: dict[str, PrefixReuseSummary] = {}
        self.num_skipped = 0

    def prefill_with_chunked_contexts(self, active: Iterable[LlmRequest]) -> None:
        """Contexts already mid-chunk will contribute their first new block: pre-register it."""
        if not self.skipping:
            return
        for req in active:
            if req.is_context_init_state and not req.is_first_context_chunk:
                block = self.acct.analyze_prefix_reuse(req).first_new_block
                if block is not None:
                    self.contributed.add(block)

    def summary(self, req: LlmRequest) -> PrefixReuseSummary | None:
        """The round's summary for a first chunk (one walk per request); None for other requests."""
        if not (req.is_context_init_state and req.is_first_context_chunk):
            return None
        if not self.prefix_aware:
            return NO_REUSE
        cached = self._cache.get(req.request_id)
        if cached is None:
            cached = self._cache[req.request_id] = self.acct.analyze_prefix_reuse(req)
        return cached

    def beneficial_to_skip(self, req: LlmRequest) -> bool:
        """Pure: true when a first-chunk context's first new block is already being contributed."""
        if not (self.skipping and req.is_context_init_state and req.is_first_context_chunk):
            return False
        summary = self.summary(req)
        assert summary is not None
        block = summary.first_new_block
        skip = block is not None and block in self.contributed
        self.num_skipped += skip
        return skip

    def register_contributed_blocks(self, req: LlmRequest) -> None:
        """Called once the request is admitted: later duplicates may now wait for its block."""
        if not (self.skipping and req.is_context_init_state and req.is_first_context_chunk):
            return
        summary = self.summary(req)
        assert summary is not None
        if summary.first_new_block is not None:
            self.contributed.add(summary.first_new_block)
