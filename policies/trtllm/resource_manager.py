"""The executor's KV resource manager (resource_manager.py's KVCacheManager wrapper around the C++ one).

`prepare_resources` backs a scheduled batch: every context on its first chunk gets its sequence
(`addSequence`, with reuse: the matched prefix moves the chunk's start), in batch order; every
generation one token (plus its drafts). Reuse can make a chunk the last one, so the contexts are
re-binned; then `fit_token_budget` shrinks chunks whose real reuse fell short of the estimate
the micro-batch scheduler charged. `update_resources` stores the blocks of contexts whose prompt
is complete; `free_resources` releases a request's sequence, storing its blocks for reuse. A
request whose blocks only its own keys reach (no token ids, no trace hashes) is stored only when it
releases them and lives on (a pause), and pruned at its end (`release_finished`): nobody else
could look those blocks up, so no decision changes and the tree holds far fewer nodes.

Where TensorRT-LLM fails (no free block for an allocation, a forward pass over max_num_tokens
after the trim) this raises the matching `TrtllmFailure`.
"""

from __future__ import annotations

from .block_keys import BlockKey, BlockKeys
from .errors import KvCacheExhausted, KvCacheExhaustedError, TokenBudgetExceeded
from .kv_cache_manager import KVCacheManager
from .scheduled_requests import ScheduledRequests
from .state import LlmRequest
from .stats import TrtllmStats


def forward_tokens(req: LlmRequest) -> int:
    """Positions a scheduled request feeds the forward pass (`_request_forward_tokens`)."""
    if req.is_context_init_state:
        drafts = req.num_draft_tokens if req.is_last_context_chunk else 0
        return min(req.context_chunk_size, req.context_remaining_length) + drafts
    return req.beam_width * (1 + req.num_draft_tokens)


class ResourceManager:
    """prepare_resources / update_resources / free_resources over one KV cache manager."""

    def __init__(
        self,
        kv: KVCacheManager,
        keys: BlockKeys,
        stats: TrtllmStats,
        max_num_tokens: int,
        chunked_prefill: bool,
        has_kv_manager: bool = True,
    ) -> None:
        """`has_kv_manager` False (max-requests): `kv` only hands out block tables to execute the batch
        (no reuse, never consulted, never short), and there is no token-budget trim (a KV cache
        manager method)."""
        self.kv = kv
        self.keys = keys
        self.stats = stats
        self.max_num_tokens = max_num_tokens
        self.chunked_prefill = chunked_prefill
        self.has_kv_manager = has_kv_manager

    # ---- prepare ----
    def prepare_resources(self, batch: ScheduledRequests, step: int) -> None:
        """Sequences for first chunks, tokens for generations, re-bin, trim to the token budget."""
        try:
            for req in batch.context_requests:
                if req.is_first_context_chunk and not self.kv.has_sequence(req.request_id):
                    self.add_sequence(req)
            for req in batch.generation_requests:
                for _i in range(1 + req.num_draft_tokens):
                    self.kv.add_token(req.request_id)
        except KvCacheExhaustedError as exc:
            ids = [r.request_id for r in batch.all_requests()]
            raise KvCacheExhausted(
                step,
                ids,
                f"prepare_resources found no free KV block ({exc}) for the "
                f"batch {ids}: TensorRT-LLM fails the batch here (TLLM_CHECK "
                "'No free blocks'); the capacity scheduler admitted more than the "
                "pool holds",
            ) from exc
        batch.reset_context_requests()
        if self.has_kv_manager:
            self.fit_token_budget(batch, step)

    def prepare_disagg_gen_init(self, reqs: list[LlmRequest], step: int) -> None:
        """_prepare_disagg_gen_init: sequences for admitted DISAGG_GENERATION_INIT requests, as for
        first context chunks (reuse sets the prepopulated length: those blocks are not received)."""
        try:
            for req in reqs:
                self.add_sequence(req)
        except KvCacheExhaustedError as exc:
            ids = [r.request_id for r in reqs]
            raise KvCacheExhausted(
                step,
                ids,
                f"prepare_resources found no free KV block ({exc}) for the DISAGG_GENERATION_INIT "
                f"requests {ids}: TensorRT-LLM fails here (TLLM_CHECK 'No free blocks'); the "
                "capacity scheduler admitted more than the pool holds",
            ) from exc

    def add_sequence(self, req: LlmRequest) -> None:
        """addSequence for the whole (effective) prompt; reuse sets the prepopulated length."""
        kv, request = self.kv, req.request
        keys: list[BlockKey] = []
        if kv.enable_block_reuse:
            first = self.keys.first_key_only(request, kv.stored_roots)
            keys = self.keys.keys(request, req.prompt_len - 1) if first is None else first
        reused = kv.add_sequence(req.request_id, req.prompt_len, keys)
        if kv.enable_block_reuse:
            req.set_prepopulated_prompt_len(reused, kv.tokens_per_block)
            req.estimated_reusable_tokens = 0
        request.num_computed_tokens = req.context_current_position
        self.stats.num_reused_tokens += reused
        for _i in range(req.num_draft_tokens):
            kv.add_token(req.request_id)

    def fit_token_budget(self, batch: ScheduledRequests, step: int) -> None:
        """Shrink context chunks from the back to block-aligned ends until the batch fits max_num_tokens.

        Never below one block of progress and never out of the batch; what cannot be shed (or any
        excess without chunked prefill) fails the forward pass in TensorRT-LLM.
        """
        contexts = batch.context_requests
        if not contexts:
            return
        total = sum(forward_tokens(r) for r in batch.generation_requests)
        total += sum(forward_tokens(r) for r in contexts)
        excess = total - self.max_num_tokens
        if excess <= 0:
            return
        if not self.chunked_prefill:
            raise TokenBudgetExceeded(
                step,
                [r.request_id for r in contexts],
                self._budget_message(total, "chunked prefill is off, so fit_token_budget cannot trim", batch),
            )
        bs = self.kv.tokens_per_block
        shed = 0
        for req in reversed(contexts):
            if excess - shed <= 0:
                break
            pos = req.context_current_position
            current = min(req.context_chunk_size, req.context_remaining_length)
            target_end = (pos + current - (excess - shed)) // bs * bs
            new_chunk = max(bs - pos % bs, target_end - pos)
            if new_chunk >= current:
                continue
            req.context_chunk_size = new_chunk
            shed += current - new_chunk
        if shed:
            batch.reset_context_requests(contexts)
        if shed < excess:
            raise TokenBudgetExceeded(
                step,
                [r.request_id for r in contexts],
                self._budget_message(
                    total - shed, f"fit_token_budget could only trim {shed} of {excess}", batch
                ),
            )

    def _budget_message(self, total: int, why: str, batch: ScheduledRequests) -> str:
        """Name the batch and the figures of a forward pass over budget."""
        ctx = [
            (r.request_id, r.context_current_position, r.context_chunk_size) for r in batch.context_requests
        ]
        gen = [r.request_id for r in batch.generation_requests]
        return (
            f"the forward pass needs {total} tokens > max_num_tokens {self.max_num_tokens} ({why}); "
            f"contexts (id, start, chunk) {ctx}, generations {gen}: "
            "the micro-batch scheduler charged a prefix-reuse estimate addSequence did not reach, and "
            "TensorRT-LLM's _prepare_tp_inputs asserts"
        )

    # ---- update / free ----
    def update_resources(self, contexts: list[LlmRequest]) -> None:
        """storeContextBlocks for each scheduled context whose whole prompt is now computed.

        A request that only its own keys reach is stored later, when it releases its blocks and
        lives on (a pause): until then only it could look them up, and it does not while it runs;
        at its end they are pruned anyway (`release_finished`)."""
        kv, keys = self.kv, self.keys
        if not kv.enable_block_reuse:
            return
        for req in contexts:
            if req.context_remaining_length > 0 or not kv.has_sequence(req.request_id):
                continue
            request = req.request
            if keys.private_root(request) is not None:
                continue
            usable = min(req.context_current_position, request.num_tokens - 1)
            kv.store_blocks(req.request_id, keys.full_keys(request, usable))

    def free_resources(self, req: LlmRequest) -> None:
        """removeSequence: store the blocks of every token but the last (a partial block too), release."""
        kv, request = self.kv, req.request
        keys = self.keys.keys(request, request.num_tokens - 1) if kv.enable_block_reuse else None
        kv.remove_sequence(req.request_id, keys)

    def release_finished(self, req: LlmRequest) -> None:
        """removeSequence at a request's end: as `free_resources`, but a request whose blocks only
        its own keys reach has them pruned from the tree rather than stored (it never returns)."""
        kv = self.kv
        root = self.keys.private_root(req.request) if kv.enable_block_reuse else None
        if root is None:
            self.free_resources(req)
        else:
            kv.remove_private_sequence(req.request_id, root)

    def undo_sequence(self, req: LlmRequest) -> None:
        """A first chunk whose step computed nothing gives its blocks back unstored and starts over."""
        self.kv.remove_sequence(req.request_id, None)
        req.prepopulated_prompt_len = req.context_current_position = 0
        req.context_chunk_size = req.prompt_len
        req.request.num_computed_tokens = 0
