"""TensorRT-LLM's KV budgeting on top of the shared block manager: prefix summaries, per-step and
to-completion block needs, and the two scheduled-blocks managers the capacity policies probe."""

from __future__ import annotations

from dataclasses import dataclass

from ..kv_cache import KVCacheManager, cdiv, ensure_block_hashes
from .state import LlmRequest


@dataclass(frozen=True, slots=True)
class PrefixReuseSummary:
    """One radix walk's answer, used both by the skip test and by the block estimate."""

    reusable_tokens: int = 0
    # Hash key of the first full prompt block not in the cache (None: nothing new, or a partial tail).
    first_new_block: int | None = None
    # Hit blocks already referenced by a live request: reusing them costs no free block.
    num_shared_hit_blocks: int = 0


NO_REUSE = PrefixReuseSummary()


class KvAccounting:
    """analyzePrefixReuse, getNeededBlocksOneStep, getRemainingBlocksToCompletion, scheduling view."""

    def __init__(self, kv: KVCacheManager) -> None:
        """Wrap the shared manager; the scheduling view starts at its free blocks."""
        self.kv = kv
        self.block_size = kv.block_size
        self._sched_free = 0
        self._sched_refs: dict[int, int] = {}

    # ---- prefix reuse ----
    def analyze_prefix_reuse(self, req: LlmRequest) -> PrefixReuseSummary:
        """Longest cached prefix of the (effective) prompt and the key of the first block after it."""
        kv = self.kv
        if not kv.enable_caching:
            return NO_REUSE
        hit, hit_tokens = kv.get_computed_blocks(req.request)
        ref_cnt = kv.pool.ref_cnt
        shared = sum(1 for b in hit if ref_cnt[b] > 0)
        idx = len(hit)
        full_prompt_blocks = req.prompt_len // self.block_size
        first_new = None
        if idx < full_prompt_blocks:
            hashes = ensure_block_hashes(req.request, idx + 1, self.block_size)
            if len(hashes) > idx and kv.pool.get_cached_block(hashes[idx]) is None:
                first_new = hashes[idx]
        return PrefixReuseSummary(hit_tokens, first_new, shared)

    def first_new_context_block(self, req: LlmRequest) -> int | None:
        """findNewContextBlock for a context already mid-chunk: the block its next chunk contributes."""
        return self.analyze_prefix_reuse(req).first_new_block

    # ---- block needs ----
    def _held(self, req: LlmRequest) -> int:
        """Blocks in the request's table now."""
        return len(self.kv.get_block_ids(req.request_id))

    def _beam_blocks(self, tokens: int, beam_width: int) -> int:
        """Full blocks shared among beams, the partial tail block once per beam."""
        bs = self.block_size
        return tokens // bs + cdiv(tokens % bs, bs) * beam_width

    def needed_blocks_one_step(
        self, req: LlmRequest, two_steps: bool, summary: PrefixReuseSummary = NO_REUSE
    ) -> int:
        """First chunk: the whole prompt (+ drafts); generation: blocks for the next 1 or 2 steps."""
        if req.is_context_init_state and req.is_first_context_chunk:
            drafts = min(req.num_draft_tokens, req.max_new_tokens)
            need = self._beam_blocks(req.prompt_len + drafts, req.beam_width)
            return max(0, need - summary.num_shared_hit_blocks - self._held(req))
        if req.is_generation_in_progress_state:
            current = req.request.num_computed_tokens
            cap = req.max_new_tokens - (current - req.prompt_len)
            to_add = max(0, min((2 if two_steps else 1) * (req.num_draft_tokens + 1), cap))
            need = cdiv(current + to_add, self.block_size) - max(
                self._held(req), cdiv(current, self.block_size)
            )
            return max(0, need) * req.beam_width
        return 0

    def remaining_blocks_to_completion(self, req: LlmRequest, summary: PrefixReuseSummary = NO_REUSE) -> int:
        """Blocks still missing for prompt + max_new_tokens; generation blocks are per beam."""
        bs = self.block_size
        context_blocks = req.prompt_len // bs
        total = cdiv(req.prompt_len + req.max_new_tokens, bs)
        allocated = self._held(req) + summary.num_shared_hit_blocks
        if allocated < context_blocks:
            return context_blocks - allocated + (total - context_blocks) * req.beam_width
        return max(0, total - allocated) * req.beam_width

    # ---- MaxUtilization's scheduling view (startScheduling / schedulingRemoveSequence) ----
    def start_scheduling(self) -> None:
        """Reset the simulated free count to the pool's real one."""
        self._sched_free = self.kv.num_free_blocks
        self._sched_refs = {}

    def scheduling_has_free_blocks(self, num_blocks: int) -> bool:
        """Would `num_blocks` fit once the simulated removals are applied."""
        return num_blocks <= self._sched_free

    def scheduling_remove_sequence(self, req: LlmRequest) -> int:
        """Simulate freeing a request's blocks (shared ones free only with their last holder)."""
        ref_cnt = self.kv.pool.ref_cnt
        freed = 0
        for bid in self.kv.get_block_ids(req.request_id):
            left = self._sched_refs.get(bid, ref_cnt[bid]) - 1
            self._sched_refs[bid] = left
            freed += left == 0
        self._sched_free += freed
        return freed


class NoEvictScheduledBlocks:
    """NoEvictScheduledBlocksManager: free blocks minus everyone's to-completion reservations."""

    def __init__(self, acct: KvAccounting) -> None:
        """Start from the pool's free blocks."""
        self.acct = acct
        self.available = acct.kv.num_free_blocks
        self._pending = 0

    def enough_available_blocks(self, req: LlmRequest, summary: PrefixReuseSummary = NO_REUSE) -> bool:
        """Probe only: remembers the need so commit_blocks charges exactly what was checked."""
        self._pending = self.acct.remaining_blocks_to_completion(req, summary)
        return self._pending <= self.available

    def commit_blocks(self) -> None:
        """Charge the last probe."""
        self.available -= self._pending
        self._pending = 0


class MaxUtilizationScheduledBlocks:
    """MaxUtilizationScheduledBlocksManager: blocks this step's admitted requests will add."""

    def __init__(self, acct: KvAccounting, two_steps_look_ahead: bool) -> None:
        """Begin a scheduling round on the accounting's simulated pool."""
        self.acct = acct
        self.two_steps = two_steps_look_ahead
        self.num_scheduled_blocks = 0
        acct.start_scheduling()

    def prepare_blocks_if_schedulable(
        self, req: LlmRequest, summary: PrefixReuseSummary = NO_REUSE
    ) -> int | None:
        """Predict the new total if `req` were scheduled; None when it would not fit. No side effect."""
        total = self.num_scheduled_blocks + self.acct.needed_blocks_one_step(req, self.two_steps, summary)
        return total if self.acct.scheduling_has_free_blocks(total) else None

    def update_scheduled_blocks(self, total: int) -> None:
        """Commit a prediction."""
        self.num_scheduled_blocks = total
