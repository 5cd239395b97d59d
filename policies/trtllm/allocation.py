"""Backing a micro-batch with KV blocks: whole-prompt allocation at the first chunk, prefix adoption,
and the runtime's fallbacks when the pool cannot back what the schedulers chose."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from ..kv_cache import KVCacheManager
from ..plan import StepPlan
from .config import TrtllmConfig
from .micro_batch import MicroBatch, MicroBatchScheduler
from .state import LlmRequest


@dataclass(slots=True)
class TrtllmStats:
    """Policy-wide counters for the metrics tables (per-request ones live on Request)."""

    num_steps: int = 0
    num_pauses: int = 0
    num_oom_pauses: int = 0
    num_prefix_skips: int = 0
    num_computed_tokens: int = 0
    num_recomputed_tokens: int = 0
    num_truncated_tokens: int = 0


class BatchAllocator:
    """The resource manager's prepare_resources: allocate, adopt prefixes, trim, undo."""

    def __init__(
        self,
        kv: KVCacheManager,
        config: TrtllmConfig,
        stats: TrtllmStats,
        pause: Callable[[LlmRequest, StepPlan], None],
    ) -> None:
        """`pause` is the policy's pause-and-free, used when a started request cannot grow."""
        self.kv = kv
        self.config = config
        self.stats = stats
        self.pause = pause

    def select_and_allocate(
        self, micro: MicroBatchScheduler, fitting: list[LlmRequest], inflight: Collection[str], plan: StepPlan
    ) -> MicroBatch:
        """Micro-batch, then blocks; a request the pool cannot back is dropped and the batch redone.

        Only max-requests (which never consults the pool) normally gets here with a failure; the
        retry keeps its budget from being wasted on a context that cannot be allocated.
        """
        excluded: set[str] = set()
        allocated: dict[str, LlmRequest] = {}
        while True:
            batch = micro.schedule([r for r in fitting if r.request_id not in excluded], inflight)
            failed = set()
            for req in batch.generation_requests + batch.context_requests:
                if req.request_id in allocated:
                    continue
                if self._allocate(req, plan):
                    allocated[req.request_id] = req
                else:
                    failed.add(req.request_id)
            if not failed:
                break
            excluded |= failed
        self._trim_to_token_budget(batch)
        chosen = {r.request_id for r in batch.generation_requests + batch.context_requests}
        for rid, req in allocated.items():
            if rid not in chosen and req.is_context_init_state and req.is_first_context_chunk:
                self.undo_first_chunk(req)
            elif rid not in chosen and req.is_context_init_state:
                req.context_chunk_size = 0
        return batch

    def _trim_to_token_budget(self, batch: MicroBatch) -> None:
        """Shrink context chunks (last first) when the real prefix hits fell short of the estimates.

        The micro-batch scheduler charged the capacity level's reuse estimate; allocations earlier in
        the step can evict cached blocks, so a chunk may compute more than it was charged. Like
        prepare_resources, trim the over-budget chunks (block-aligned unless it is the last chunk).
        """
        cost = sum(r.beam_width + r.num_draft_tokens for r in batch.generation_requests)
        cost += sum(self._context_tokens(r) for r in batch.context_requests)
        excess = cost - self.config.effective_max_num_tokens
        bs = self.config.block_size
        for req in reversed(list(batch.context_requests)):
            if excess <= 0:
                break
            before = self._context_tokens(req)
            req.draft_tokens.clear()
            end = req.context_current_position + max(0, req.context_chunk_size - excess)
            req.context_chunk_size = (
                end // bs * bs - req.context_current_position
                if end < req.prompt_len
                else req.context_chunk_size
            )
            req.context_chunk_size = max(0, req.context_chunk_size)
            excess -= before - self._context_tokens(req)
            if req.context_chunk_size == 0:
                batch.context_requests.remove(req)

    @staticmethod
    def _context_tokens(req: LlmRequest) -> int:
        """Tokens a scheduled context computes: its chunk, plus drafts riding on a last chunk."""
        return req.context_chunk_size + (req.num_draft_tokens if req.is_last_context_chunk else 0)

    def undo_first_chunk(self, req: LlmRequest) -> None:
        """Give back a first chunk's blocks when the redone batch no longer includes it."""
        self.kv.free(req.request, req.request.last_sched_seq)
        req.prepopulated_prompt_len = req.context_current_position = 0
        req.request.num_computed_tokens = 0

    def _allocate(self, req: LlmRequest, plan: StepPlan) -> bool:
        """Back the scheduled tokens with blocks; the first chunk takes the whole prompt (addSequence).

        Slots are claimed as one new token plus look-ahead so nothing not yet computed is published
        to the prefix cache: TensorRT-LLM stores blocks for reuse only after the step computed them.
        """
        kv, request = self.kv, req.request
        if req.is_generation_in_progress_state:
            ok = kv.allocate_slots(request, 1, num_lookahead_tokens=req.num_draft_tokens) is not None
        elif req.is_first_context_chunk and not kv.get_block_ids(req.request_id):
            ok = self._allocate_first_chunk(req)
        else:
            drafts = req.num_draft_tokens if req.is_last_context_chunk else 0
            ahead = req.context_chunk_size - 1 + drafts
            ok = kv.allocate_slots(request, 1, num_lookahead_tokens=ahead) is not None
        if not ok and self._is_started(req):
            # The pool ran dry under a policy that does not reserve (max-requests): pause it.
            self.stats.num_oom_pauses += 1
            self.pause(req, plan)
        return ok

    def _allocate_first_chunk(self, req: LlmRequest) -> bool:
        """Adopt the cached prefix (shifting the chunk window), then slots for the whole prompt."""
        kv, request = self.kv, req.request
        assert request.num_tokens == req.prompt_len, "a context request's outputs are folded into its prompt"
        hit_blocks, hit_tokens = kv.get_computed_blocks(request)
        chunk_before = req.context_chunk_size
        if hit_tokens:
            req.set_prepopulated_prompt_len(hit_tokens, self.config.block_size)
        drafts = req.num_draft_tokens if req.is_last_context_chunk else 0
        ahead = req.prompt_len - hit_tokens - 1 + drafts
        new = None
        if req.context_chunk_size > 0:
            new = kv.allocate_slots(request, 1, hit_tokens, hit_blocks, num_lookahead_tokens=ahead)
        if new is None:
            req.prepopulated_prompt_len = req.context_current_position = 0
            req.context_chunk_size = chunk_before
            return False
        request.num_computed_tokens = hit_tokens
        return True

    @staticmethod
    def _is_started(req: LlmRequest) -> bool:
        """Holds KV worth pausing for."""
        return req.is_generation_in_progress_state or not req.is_first_context_chunk
