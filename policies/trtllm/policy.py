"""The Policy adapter: capacity scheduler, then micro-batch scheduler, then KV allocation -> StepPlan."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..kv_cache import KVCacheManager
from ..plan import RequestOutput, StepPlan, StepResult
from ..request import Request, RequestStatus
from .capacity import CapacityScheduler, CapacitySchedulerPolicy, PeftBudget
from .chunking import ChunkingPolicy
from .config import TrtllmConfig
from .invariants import check_policy_invariants
from .kv_accounting import KvAccounting
from .lifecycle import advance_context, append_tokens
from .micro_batch import ContextChunkingConfig, MicroBatch, MicroBatchScheduler
from .pause import pause
from .state import LlmRequest, LlmRequestState


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


class TrtllmPolicy:
    """TensorRT-LLM's SimpleScheduler (capacity -> micro-batch) plus the executor's pause handling."""

    max_concurrent_batches = 1

    def __init__(self, config: TrtllmConfig, capacity_policy: CapacitySchedulerPolicy) -> None:
        """Build the block manager, the two scheduler levels and the bookkeeping."""
        self.config = config
        self.capacity_policy = capacity_policy
        self.kv = KVCacheManager(config.num_gpu_blocks, config.block_size, config.max_model_len,
                                 enable_caching=config.enable_prefix_caching)
        peft = None if config.max_peft_pages is None else PeftBudget(config.max_peft_pages,
                                                                      config.peft_pages_per_adapter)
        # max-requests is TensorRT-LLM's scheduler without a KV manager: it never consults the pool.
        no_kv = capacity_policy is CapacitySchedulerPolicy.MAX_REQUESTS
        self.acct = None if no_kv else KvAccounting(self.kv)
        self.capacity = CapacityScheduler(
            capacity_policy, config.max_num_seqs, self.acct, two_steps_look_ahead=config.two_step_lookahead,
            prefix_aware=config.enable_prefix_aware_scheduling,
            variable_window=config.variable_window_attention, peft=peft)
        chunking = None
        if config.enable_chunked_prefill:
            chunking = ContextChunkingConfig(ChunkingPolicy(config.chunking_policy),
                                             config.effective_chunk_unit)
        self.micro = MicroBatchScheduler(config.effective_max_batch_size, config.effective_max_num_tokens,
                                         chunking)
        self.active: list[LlmRequest] = []
        self.requests: dict[str, LlmRequest] = {}
        self.inflight: dict[str, tuple[int, int]] = {}  # id -> (non-draft tokens, drafts) scheduled
        self._finished_ids: list[str] = []
        self._step = 0
        self.stats = TrtllmStats()

    # ---- queue ----
    def _snapshot_points(self, prompt_len: int) -> tuple[int, ...]:
        """force-chunk's expected snapshot points along the (effective) prompt."""
        if self.config.chunking_policy != ChunkingPolicy.FORCE_CHUNK.value:
            return ()
        step = self.config.effective_snapshot_interval
        return tuple(range(step, prompt_len, step))

    def add_request(self, request: Request) -> None:
        """Enqueue; a prompt over max_input_len is rejected as TensorRT-LLM's executor does."""
        cfg = self.config
        if request.request_id in self.requests:
            raise ValueError(f"request {request.request_id}: request_id already queued")
        if request.prompt_len > cfg.effective_max_input_len:
            raise ValueError(f"request {request.request_id}: prompt_len {request.prompt_len} exceeds "
                             f"max_input_len {cfg.effective_max_input_len}")
        if request.status is not RequestStatus.WAITING or request.num_computed_tokens \
                or request.output_token_ids:
            raise ValueError(f"request {request.request_id}: status must be WAITING with no computed tokens")
        max_new = min(request.max_tokens, cfg.max_model_len - request.prompt_len)
        req = LlmRequest.from_request(request, max_new, self._snapshot_points(request.prompt_len))
        self.active.append(req)
        self.requests[request.request_id] = req

    def abort_requests(self, request_ids: Iterable[str]) -> list[Request]:
        """Finish live requests as aborted and free their KV."""
        aborted = []
        for rid in request_ids:
            req = self.requests.get(rid)
            if req is not None:
                self._finish(req, RequestStatus.FINISHED_ABORTED)
                aborted.append(req.request)
        return aborted

    def has_unfinished_requests(self) -> bool:
        """Anything still waiting, paused or running."""
        return bool(self.active)

    def has_requests(self) -> bool:
        """Unfinished requests, or finishes not yet reported in a plan."""
        return bool(self.active) or bool(self._finished_ids)

    def get_request_counts(self) -> tuple[int, int]:
        """(running, waiting): running = admitted and executed since its last (re)admission."""
        running = sum(1 for r in self.active if r.has_run)
        return running, len(self.active) - running

    def kv_usage(self) -> float:
        """Fraction of usable blocks held."""
        return self.kv.usage

    def update_draft_token_ids(self, drafts: Mapping[str, list[int]]) -> None:
        """Attach drafts for the next step: at most the spec profile, and never past max_new_tokens."""
        for rid, ids in drafts.items():
            req = self.requests.get(rid)
            if req is not None and req.is_generation_in_progress_state:
                room = req.max_new_tokens - req.max_num_generated_tokens - 1
                req.draft_tokens = list(ids[:max(min(req.request.num_spec_tokens, room), 0)])
                req.request.spec_token_ids = list(req.draft_tokens)

    # ---- scheduling ----
    def schedule(self) -> StepPlan:
        """Capacity -> pause -> micro-batch -> allocate; requests whose KV cannot grow wait or pause."""
        plan = StepPlan(step_id=self._step)
        plan.finished_req_ids, self._finished_ids = self._finished_ids, []
        cap = self.capacity.schedule(self.active)
        self.stats.num_prefix_skips += cap.num_prefix_skipped
        for victim in cap.paused:
            self._pause(victim, plan)
        batch = self._select_and_allocate(cap.fitting, plan)
        for req in batch.context_requests + batch.generation_requests:
            self._add_to_plan(req, plan)
        self._step += 1
        self.stats.num_steps += 1
        return plan

    def _select_and_allocate(self, fitting: list[LlmRequest], plan: StepPlan) -> MicroBatch:
        """Micro-batch, then blocks; a request the pool cannot back is dropped and the batch redone.

        Only max-requests (which never consults the pool) normally gets here with a failure; the
        retry keeps its budget from being wasted on a context that cannot be allocated.
        """
        excluded: set[str] = set()
        allocated: dict[str, LlmRequest] = {}
        while True:
            batch = self.micro.schedule([r for r in fitting if r.request_id not in excluded], self.inflight)
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
                self._undo_first_chunk(req)
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
            req.context_chunk_size = end // bs * bs - req.context_current_position if end < req.prompt_len \
                else req.context_chunk_size
            req.context_chunk_size = max(0, req.context_chunk_size)
            excess -= before - self._context_tokens(req)
            if req.context_chunk_size == 0:
                batch.context_requests.remove(req)

    @staticmethod
    def _context_tokens(req: LlmRequest) -> int:
        """Tokens a scheduled context computes: its chunk, plus drafts riding on a last chunk."""
        return req.context_chunk_size + (req.num_draft_tokens if req.is_last_context_chunk else 0)

    def _undo_first_chunk(self, req: LlmRequest) -> None:
        """Give back a first chunk's blocks when the redone batch no longer includes it."""
        self.kv.free(req.request)
        req.prepopulated_prompt_len = req.context_current_position = 0
        req.request.num_computed_tokens = 0

    def _pause(self, req: LlmRequest, plan: StepPlan) -> None:
        """LlmRequest::pause, then free its KV so re-admission recomputes (reusing cached blocks)."""
        self.kv.free(req.request)
        lost = pause(req, self.config.effective_max_input_len)
        request = req.request
        del request.block_hashes[request.num_tokens // self.config.block_size:]
        req.expected_snapshot_points = self._snapshot_points(req.prompt_len)
        plan.paused_req_ids.append(req.request_id)
        self.stats.num_pauses += 1
        self.stats.num_truncated_tokens += lost

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
            self._pause(req, plan)
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

    def _add_to_plan(self, req: LlmRequest, plan: StepPlan) -> None:
        """Record one scheduled request: its tokens, context length, drafts and block table."""
        request, rid = req.request, req.request_id
        generation = req.is_generation_in_progress_state
        base = 1 if generation else req.context_chunk_size
        drafts = req.num_draft_tokens if (generation or req.is_last_context_chunk) else 0
        plan.num_scheduled_tokens[rid] = base + drafts
        plan.total_num_scheduled_tokens += base + drafts
        plan.context_lens[rid] = request.num_computed_tokens
        plan.block_ids[rid] = self.kv.get_block_ids(rid)
        if drafts:
            plan.spec_decode_tokens[rid] = list(req.draft_tokens)
        if request.status is RequestStatus.WAITING:
            plan.new_req_ids.append(rid)
        elif request.status is RequestStatus.PREEMPTED:
            plan.resumed_req_ids.append(rid)
        request.status = RequestStatus.RUNNING
        req.has_run = True
        self.inflight[rid] = (base, drafts)

    # ---- results ----
    def update_from_output(self, plan: StepPlan, result: StepResult) -> list[RequestOutput]:
        """Advance cursors, append sampled tokens (accepted drafts + bonus), stop-check, report finishes."""
        outputs: list[RequestOutput] = []
        for rid in plan.num_scheduled_tokens:
            req = self.requests.get(rid)
            scheduled = self.inflight.pop(rid, None)
            if req is None or scheduled is None:
                continue  # aborted while in flight
            base, drafts = scheduled
            if rid in result.failed_kv_load_ids:
                req.draft_tokens.clear()
                continue  # nothing computed: the same tokens are scheduled again
            sampled = result.sampled_token_ids.get(rid, [])
            accepted = min(max(len(sampled) - 1, 0), drafts)
            self.stats.num_computed_tokens += base + accepted
            if req.is_generation_in_progress_state:
                req.request.num_computed_tokens += base + accepted
            else:
                before = req.request.num_recomputed_tokens
                done = advance_context(req, base)
                self.stats.num_recomputed_tokens += req.request.num_recomputed_tokens - before
                if not done:
                    self.kv.cache_blocks(req.request, req.request.num_computed_tokens)
                    continue  # a non-last chunk samples nothing
                req.request.num_computed_tokens += accepted
            self.kv.cache_blocks(req.request, req.request.num_computed_tokens)
            new_tokens, finish = append_tokens(req, sampled[:accepted + 1], self.config.max_model_len)
            req.draft_tokens = []
            req.request.spec_token_ids = []
            if rid in result.draft_token_ids and finish is None:
                self.update_draft_token_ids({rid: result.draft_token_ids[rid]})
            outputs.append(RequestOutput(rid, new_tokens, finish))
            if finish is not None:
                self._finish(req, finish)
        return outputs

    def _finish(self, req: LlmRequest, status: RequestStatus) -> None:
        """GENERATION_COMPLETE: free the KV and drop the request from the active list."""
        request = req.request
        req.state = LlmRequestState.GENERATION_COMPLETE
        request.status = status
        self.kv.free(request)
        self.kv.drop_request(request)
        self.active.remove(req)
        del self.requests[req.request_id]
        self.inflight.pop(req.request_id, None)
        self._finished_ids.append(req.request_id)

    def check_invariants(self) -> None:
        """KV conservation in the pool, plus each request's cursor, tokens and block table agree."""
        check_policy_invariants(self)
