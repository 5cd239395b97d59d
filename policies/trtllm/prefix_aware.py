"""Prefix-aware skipping (beneficialToSkip): defer a context whose first new block someone computes now."""

from __future__ import annotations

from collections.abc import Iterable

from .kv_accounting import NO_REUSE, KvAccounting, PrefixReuseSummary
from .state import LlmRequest


class PrefixSkipper:
    """One scheduling round's contributed-block set and per-request prefix summaries.

    The skip test is pure; a request registers its first new block only once admitted. Registering
    at check time would defer duplicates on behalf of a contributor the budget then rejects, and in
    max-utilization it would make a request skip itself on the retry after a pause.
    """

    def __init__(self, acct: KvAccounting | None, summaries: bool, skipping: bool) -> None:
        """`summaries`: prefix-aware scheduling on; `skipping`: also defer duplicates this round."""
        self.acct = acct
        self.summaries = summaries and acct is not None and acct.kv.enable_caching
        self.skipping = skipping and self.summaries
        self.contributed: set[int] = set()
        self._cache: dict[str, PrefixReuseSummary] = {}
        self.num_skipped = 0

    def prefill_with_chunked_contexts(self, active: Iterable[LlmRequest]) -> None:
        """Contexts already mid-chunk will contribute their next block this step: pre-register it."""
        if not self.skipping:
            return
        for req in active:
            if req.is_context_init_state and not req.is_first_context_chunk:
                assert self.acct is not None
                block = self.acct.first_new_context_block(req)
                if block is not None:
                    self.contributed.add(block)

    def summary(self, req: LlmRequest) -> PrefixReuseSummary:
        """One walk per request per round; it also sets the micro-batch's reuse estimate."""
        if not (self.summaries and req.is_context_init_state and req.is_first_context_chunk):
            return NO_REUSE
        cached = self._cache.get(req.request_id)
        if cached is None:
            assert self.acct is not None
            cached = self._cache[req.request_id] = self.acct.analyze_prefix_reuse(req)
            req.estimated_reusable_tokens = cached.reusable_tokens
        return cached

    def beneficial_to_skip(self, req: LlmRequest) -> bool:
        """Pure: true when a first-chunk context's first new block is already being contributed."""
        if not (self.skipping and req.is_context_init_state and req.is_first_context_chunk):
            return False
        block = self.summary(req).first_new_block
        skip = block is not None and block in self.contributed
        self.num_skipped += skip
        return skip

    def register_contributed_blocks(self, req: LlmRequest) -> None:
        """Called once the request is admitted: later duplicates may now wait for its block."""
        if not (self.skipping and req.is_context_init_state and req.is_first_context_chunk):
            return
        block = self.summary(req).first_new_block
        if block is not None:
            self.contributed.add(block)
