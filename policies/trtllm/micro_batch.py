"""Level 2, the micro-batch scheduler: which fitting requests run this forward pass, and how much."""

from __future__ import annotations

from dataclasses import dataclass

from .chunking import ChunkingPolicy, chunk_compute, set_ctx_requests_chunk_size
from .state import LlmRequest


@dataclass(frozen=True, slots=True)
class ContextChunkingConfig:
    """ctx_chunk_config: the policy and the unit chunks are floored to (a multiple of the block size)."""

    chunking_policy: ChunkingPolicy
    chunk_unit_size: int

    def __post_init__(self) -> None:
        """A zero unit would never make progress."""
        if self.chunk_unit_size < 1:
            raise ValueError(
                f"ContextChunkingConfig.chunk_unit_size must be >= 1, got {self.chunk_unit_size}"
            )


class MicroBatch:
    """The selected context and generation requests, already in the executor's order."""

    def __init__(
        self,
        context_requests: list[LlmRequest],
        generation_requests: list[LlmRequest],
        num_compute_tokens: int,
    ) -> None:
        self.context_requests, self.generation_requests = context_requests, generation_requests
        self.num_compute_tokens = num_compute_tokens


def lora_key(req: LlmRequest) -> tuple[int, int]:
    """No LoRA sorts first, like an empty std::optional."""
    tid = req.lora_task_id
    return (0, 0) if tid is None else (1, tid)


def sort_by_lora(reqs: list[LlmRequest]) -> None:
    """Stable sort by LoRA id; without an adapter every key is equal and the order stays as it is."""
    if any(r.lora_task_id is not None for r in reqs):
        reqs.sort(key=lora_key)


def sort_requests(contexts: list[LlmRequest], generations: list[LlmRequest], chunks_present: bool) -> None:
    """Last chunks go to the end (the sampler groups them); each group is sorted by LoRA id."""
    if chunks_present:
        middle = [r for r in contexts if not r.is_last_context_chunk]
        last = [r for r in contexts if r.is_last_context_chunk]
        sort_by_lora(middle)
        sort_by_lora(last)
        contexts[:] = middle + last
    else:
        sort_by_lora(contexts)
    sort_by_lora(generations)


class MicroBatchScheduler:
    """PyMicroBatchScheduler: max_batch_size and max_num_tokens gates, chunking, beam consistency."""

    def __init__(
        self, max_batch_size: int, max_num_tokens: int | None, ctx_chunk_config: ContextChunkingConfig | None
    ) -> None:
        """max_context_length equals max_num_tokens, as the executor wires it."""
        if max_batch_size < 1:
            raise ValueError(f"MicroBatchScheduler.max_batch_size must be >= 1, got {max_batch_size}")
        if max_num_tokens is not None and max_num_tokens < 1:
            raise ValueError(f"MicroBatchScheduler.max_num_tokens must be >= 1, got {max_num_tokens}")
        self.max_batch_size = max_batch_size
        self.max_num_tokens = max_num_tokens
        self.max_context_length = max_num_tokens
        self.ctx_chunk_config = ctx_chunk_config

    def _unchunked_context_cost(self, req: LlmRequest) -> int:
        """Whole remaining context plus drafts, at least 1 so a fully cached prompt is never free."""
        drafts = req.num_draft_tokens
        req.context_chunk_size = req.context_remaining_length
        cost = max(1, chunk_compute(req) + drafts)
        if self.max_context_length is not None and cost > self.max_context_length:
            raise ValueError(
                f"request {req.request_id}: context compute {cost} exceeds max_num_tokens "
                f"{self.max_context_length} and chunking is disabled"
            )
        return cost

    def schedule(self, fitting: list[LlmRequest], inflight_ids: set[str]) -> MicroBatch:
        """One pass selects; a second hands the leftover budget to the contexts via the chunking policy."""
        contexts: list[LlmRequest] = []
        generations: list[LlmRequest] = []
        to_chunk: list[LlmRequest] = []
        batch_tokens = chunked_tokens = count = beam = 0
        all_fit = True
        limit = self.max_num_tokens
        for req in fitting:
            if not req.in_micro_batch_window or req.request_id in inflight_ids:
                continue
            if req.is_context_init_state and self.ctx_chunk_config is None:
                cost = self._unchunked_context_cost(req)
                if limit is not None and batch_tokens + cost > limit:
                    break
                contexts.append(req)
                batch_tokens += cost
            elif req.is_context_init_state:
                req.context_chunk_size = req.context_remaining_length
                drafts = req.num_draft_tokens if req.is_last_context_chunk else 0
                cost = chunk_compute(req) + drafts
                if self.max_context_length is not None and cost > self.max_context_length:
                    cost, all_fit = self.max_context_length, False
                to_chunk.append(req)
                chunked_tokens += cost
            else:
                cost = req.beam_width + req.num_draft_tokens
                if limit is not None and batch_tokens + cost > limit:
                    break
                if beam == 0:
                    beam = req.beam_width
                elif beam != req.beam_width:
                    continue  # one beam width per batch: the sampler's tensors share a shape
                generations.append(req)
                batch_tokens += cost
            count += 1
            if count >= self.max_batch_size:
                break
        batch_tokens, chunks_present = self._finish_chunking(
            to_chunk, contexts, batch_tokens, chunked_tokens, all_fit
        )
        sort_requests(contexts, generations, chunks_present)
        return MicroBatch(contexts, generations, batch_tokens)

    def _finish_chunking(
        self,
        to_chunk: list[LlmRequest],
        contexts: list[LlmRequest],
        batch_tokens: int,
        chunked_tokens: int,
        all_fit: bool,
    ) -> tuple[int, bool]:
        """Run the chunking policy when the contexts do not all fit (always for force-chunk)."""
        limit = self.max_num_tokens
        if limit is not None and chunked_tokens > limit - batch_tokens:
            all_fit = False
        cfg = self.ctx_chunk_config
        if cfg is not None and cfg.chunking_policy is ChunkingPolicy.FORCE_CHUNK:
            all_fit = False
        if not all_fit and to_chunk:
            assert cfg is not None, "without chunking, context scheduling must already be complete"
            capacity = None if limit is None else limit - batch_tokens
            set_ctx_requests_chunk_size(
                to_chunk, cfg.chunking_policy, capacity, cfg.chunk_unit_size, self.max_context_length
            )
        for req in to_chunk:
            if req.context_chunk_size > 0:
                contexts.append(req)
                batch_tokens += chunk_compute(req)
        return batch_tokens, not all_fit
