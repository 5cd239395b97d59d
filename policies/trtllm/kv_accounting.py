"""TensorRT-LLM's KV budgeting over its block manager: prefix summaries, per-step and to-completion block
needs, and the two scheduled-blocks managers the capacity policies probe.

Both block needs reset the request's `estimated_reusable_tokens` and, on a first context chunk,
set it from the prefix summary: all stored full blocks of the prompt count (countReusableBlocks
over every token), although addSequence reuses at most `prompt - 1` tokens; the block credit
counts only stored blocks some live sequence holds (reusing those takes no free block).
"""

from __future__ import annotations

from .block_keys import BlockKeys
from .kv_cache_manager import NO_REUSE, KVCacheManager, PrefixReuseSummary
from .state import LlmRequest


def cdiv(a: int, b: int) -> int:
    """Ceiling division."""
    return -(-a // b)


class KvAccounting:
    """analyzePrefixReuse, getNeededBlocksOneStep, getRemainingBlocksToCompletion, scheduling view."""

    def __init__(self, kv: KVCacheManager, keys: BlockKeys) -> None:
        """Read the manager and the requests' block keys."""
        self.kv = kv
        self.keys = keys
        self.block_size = kv.tokens_per_block

    # ---- prefix reuse ----
    def analyze_prefix_reuse(self, req: LlmRequest) -> PrefixReuseSummary:
        """One walk over the full blocks of the request's tokens."""
        if not self.kv.enable_block_reuse:
            return NO_REUSE
        request, kv = req.request, self.kv
        keys = self.keys.first_key_only(request, kv.stored_roots)
        if keys is None:
            keys = self.keys.full_keys(request, request.num_tokens)
        return kv.analyze_prefix_reuse(keys)

    # ---- block needs ----
    def needed_blocks_one_step(
        self, req: LlmRequest, two_steps: bool, summary: PrefixReuseSummary | None = None
    ) -> int:
        """getNeededBlocksOneStep: a first chunk's whole prompt (+ drafts) less held stored blocks;
        a DISAGG_GENERATION_INIT request's whole prompt (no reuse credit: the scheduler computes no
        prefix summary for it); a generation's blocks for the next one or two steps; nothing for
        later chunks.

        `summary`: this round's prefix summary of a first chunk (None: walk the tree now).
        """
        bs = self.block_size
        req.estimated_reusable_tokens = 0
        kv = self.kv
        first_chunk = req.is_context_init_state and req.is_first_context_chunk
        if first_chunk or req.is_disagg_generation_init_state:
            cache_len = min(req.prompt_len + req.num_draft_tokens, kv.max_seq_len + req.max_new_tokens)
            shared = cache_len // bs
            required = shared + cdiv(cache_len % bs, bs) * req.beam_width
            if kv.enable_block_reuse and first_chunk:
                s = summary if summary is not None else self.analyze_prefix_reuse(req)
                required -= min(s.reusable_blocks_allocated, shared)
                req.estimated_reusable_tokens = min(s.reusable_blocks_all, shared) * bs
            return required
        if req.is_generation_in_progress_state:
            current = kv.num_tokens(req.request_id)
            left = req.max_new_tokens - (current - req.prompt_len)
            to_add = min((2 if two_steps else 1) * (req.num_draft_tokens + 1), left)
            target = current + to_add
            if target > kv.max_seq_len:
                return 0
            return (cdiv(target, bs) - cdiv(current, bs)) * req.beam_width
        return 0

    def remaining_blocks_to_completion(
        self, req: LlmRequest, summary: PrefixReuseSummary | None = None
    ) -> int:
        """getRemainingBlocksToCompletion: blocks still missing for prompt + max_new_tokens.

        A first chunk holding nothing is credited the stored prompt blocks live sequences hold.
        """
        bs = self.block_size
        kv = self.kv
        req.estimated_reusable_tokens = 0
        context_blocks = req.prompt_len // bs
        total = cdiv(req.prompt_len + req.max_new_tokens, bs)
        generation_blocks = (total - context_blocks) * req.beam_width
        allocated = kv.num_blocks_of(req.request_id)
        reusable = 0
        if (
            kv.enable_block_reuse
            and req.is_context_init_state
            and req.is_first_context_chunk
            and allocated == 0
        ):
            s = summary if summary is not None else self.analyze_prefix_reuse(req)
            reusable = min(s.reusable_blocks_allocated, context_blocks)
            req.estimated_reusable_tokens = min(s.reusable_blocks_all, context_blocks) * bs
        effective = context_blocks - reusable
        if allocated < effective:
            return effective - allocated + generation_blocks
        return (total - reusable - allocated) * req.beam_width

    # ---- max-utilization's scheduling view ----
    def start_scheduling(self) -> None:
        """startScheduling."""
        self.kv.start_scheduling()

    def scheduling_has_free_blocks(self, num_blocks: int) -> bool:
        """schedulingHasFreeBlocks."""
        return self.kv.scheduling_has_free_blocks(num_blocks)

    def scheduling_remove_sequence(self, req: LlmRequest) -> None:
        """schedulingRemoveSequence."""
        self.kv.scheduling_remove_sequence(req.request_id)

    @property
    def num_free_blocks(self) -> int:
        """The pool's free blocks."""
        return self.kv.num_free_blocks


class NoEvictScheduledBlocks:
    """NoEvictScheduledBlocksManager: free blocks minus everyone's to-completion reservations."""

    def __init__(self, acct: KvAccounting) -> None:
        """Start from the pool's free blocks."""
        self.acct = acct
        self.available = acct.num_free_blocks

    def enough_available_blocks(self, req: LlmRequest, summary: PrefixReuseSummary | None = None) -> bool:
        """enoughAvailableBlocks."""
        return self.acct.remaining_blocks_to_completion(req, summary) <= self.available

    def decrement_reserved_blocks(self, req: LlmRequest, summary: PrefixReuseSummary | None = None) -> None:
        """decrementReservedBlocks."""
        self.available -= self.acct.remaining_blocks_to_completion(req, summary)


class MaxUtilizationScheduledBlocks:
    """MaxUtilizationScheduledBlocksManager: blocks this step's admitted requests will add."""

    def __init__(self, acct: KvAccounting, two_steps_look_ahead: bool) -> None:
        """Begin a scheduling round on the manager's scheduling view."""
        self.acct = acct
        self.two_steps = two_steps_look_ahead
        self.num_scheduled_blocks = 0
        acct.start_scheduling()

    def prepare_blocks_if_schedulable(
        self, req: LlmRequest, summary: PrefixReuseSummary | None = None
    ) -> int | None:
        """The new total if `req` were scheduled; None when it would not fit."""
        total = self.num_scheduled_blocks + self.acct.needed_blocks_one_step(req, self.two_steps, summary)
        return total if self.acct.scheduling_has_free_blocks(total) else None

    def update_scheduled_blocks(self, total: int) -> None:
        """Commit a prediction."""
        self.num_scheduled_blocks = total
