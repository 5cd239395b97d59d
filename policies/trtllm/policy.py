"""The Policy adapter: capacity scheduler, then micro-batch scheduler, then KV allocation -> StepPlan."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..kv_cache import KVCacheManager
from ..plan import RequestOutput, StepPlan, StepResult
from ..request import Request, RequestStatus
from .allocation import BatchAllocator, TrtllmStats
from .capacity import CapacityScheduler, CapacitySchedulerPolicy, PeftBudget
from .chunking import ChunkingPolicy
from .config import TrtllmConfig
from .fastforward import TrtllmFastForward
from .invariants import check_policy_invariants
from .kv_accounting import KvAccounting
from .lifecycle import advance_context, append_tokens
from .micro_batch import ContextChunkingConfig, MicroBatchScheduler
from .pause import pause
from .state import LlmRequest, LlmRequestState


class TrtllmPolicy:
    """TensorRT-LLM's SimpleScheduler (capacity -> micro-batch) plus the executor's pause handling."""

    def __init__(self, config: TrtllmConfig, capacity_policy: CapacitySchedulerPolicy) -> None:
        """Build the block manager, the two scheduler levels and the bookkeeping."""
        self.config = config
        self.capacity_policy = capacity_policy
        # > 1: pipeline micro-batches in flight; the micro-batch scheduler skips their requests.
        self.max_concurrent_batches = config.num_micro_batches
        self.kv = KVCacheManager(
            config.num_gpu_blocks,
            config.block_size,
            config.max_model_len,
            enable_caching=config.enable_prefix_caching,
        )
        peft = (
            None
            if config.max_peft_pages is None
            else PeftBudget(config.max_peft_pages, config.peft_pages_per_adapter)
        )
        # max-requests is TensorRT-LLM's scheduler without a KV manager: it never consults the pool.
        no_kv = capacity_policy is CapacitySchedulerPolicy.MAX_REQUESTS
        self.acct = None if no_kv else KvAccounting(self.kv)
        self.capacity = CapacityScheduler(
            capacity_policy,
            config.max_num_seqs,
            self.acct,
            two_steps_look_ahead=config.two_step_lookahead,
            prefix_aware=config.enable_prefix_aware_scheduling,
            variable_window=config.variable_window_attention,
            peft=peft,
        )
        chunking = None
        if config.enable_chunked_prefill:
            chunking = ContextChunkingConfig(
                ChunkingPolicy(config.chunking_policy), config.effective_chunk_unit
            )
        self.micro = MicroBatchScheduler(
            config.effective_max_batch_size, config.effective_max_num_tokens, chunking
        )
        self.stats = TrtllmStats()
        self.allocator = BatchAllocator(self.kv, config, self.stats, self._pause)
        self.active: list[LlmRequest] = []
        self.requests: dict[str, LlmRequest] = {}
        self.inflight: dict[str, tuple[int, int]] = {}  # id -> (non-draft tokens, drafts) scheduled
        self.finished_req_ids: list[str] = []  # reported in the next plan
        self.iter_counter = 0  # PyExecutor's: the plan's step id

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
            raise ValueError(
                f"request {request.request_id}: prompt_len {request.prompt_len} exceeds "
                f"max_input_len {cfg.effective_max_input_len}"
            )
        if (
            request.status is not RequestStatus.WAITING
            or request.num_computed_tokens
            or request.output_token_ids
        ):
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
        return bool(self.active) or bool(self.finished_req_ids)

    def get_request_counts(self) -> tuple[int, int]:
        """(running, waiting): running = admitted and executed since its last (re)admission."""
        running = sum(1 for r in self.active if r.has_run)
        return running, len(self.active) - running

    def kv_usage(self) -> float:
        """Fraction of usable blocks held."""
        return self.kv.usage

    def fast_forward(self) -> TrtllmFastForward:
        """Exact fast-forward of steady generation stretches (SupportsFastForward)."""
        return TrtllmFastForward(self)

    def run_counters(self) -> dict[str, int]:
        """The run summary's count of prefix-aware skips (no table has a row per skip)."""
        return {"num_prefix_skips": self.stats.num_prefix_skips}

    def update_draft_token_ids(self, drafts: Mapping[str, list[int]]) -> None:
        """Attach drafts for the next step: at most the spec profile, and never past max_new_tokens."""
        for rid, ids in drafts.items():
            req = self.requests.get(rid)
            if req is not None and req.is_generation_in_progress_state:
                room = req.max_new_tokens - req.max_num_generated_tokens - 1
                req.draft_tokens = list(ids[: max(min(req.request.num_spec_tokens, room), 0)])
                req.request.spec_token_ids = list(req.draft_tokens)

    # ---- scheduling ----
    def schedule(self) -> StepPlan:
        """Capacity -> pause -> micro-batch -> allocate; requests whose KV cannot grow wait or pause."""
        plan = StepPlan(step_id=self.iter_counter)
        plan.finished_req_ids, self.finished_req_ids = self.finished_req_ids, []
        cap = self.capacity.schedule(self.active, self.inflight)
        self.stats.num_prefix_skips += cap.num_prefix_skipped
        for victim in cap.paused:
            self._pause(victim, plan)
        batch = self.allocator.select_and_allocate(self.micro, cap.fitting, self.inflight, plan)
        for req in batch.context_requests + batch.generation_requests:
            self._add_to_plan(req, plan)
        if plan.num_scheduled_tokens:
            seq = self.kv.begin_step()
            for rid in plan.num_scheduled_tokens:
                self.requests[rid].request.last_sched_seq = seq
        self.iter_counter += 1
        self.stats.num_steps += 1
        return plan

    def _pause(self, req: LlmRequest, plan: StepPlan) -> None:
        """LlmRequest::pause, then free its KV so re-admission recomputes (reusing cached blocks)."""
        self.kv.free(req.request, req.request.last_sched_seq)
        lost = pause(req, self.config.effective_max_input_len)
        request = req.request
        del request.block_hashes[request.num_tokens // self.config.block_size :]
        req.expected_snapshot_points = self._snapshot_points(req.prompt_len)
        plan.paused_req_ids.append(req.request_id)
        self.stats.num_pauses += 1
        self.stats.num_truncated_tokens += lost

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
        if plan.num_scheduled_tokens:
            self.kv.end_step()
        for rid in plan.num_scheduled_tokens:
            req = self.requests.get(rid)
            scheduled = self.inflight.pop(rid, None)
            if req is None or scheduled is None:
                continue  # aborted while in flight
            base, drafts = scheduled
            if rid in result.failed_kv_load_ids:
                self._kv_load_failed(req)
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
            new_tokens, finish = append_tokens(req, sampled[: accepted + 1], self.config.max_model_len)
            req.draft_tokens = []
            req.request.spec_token_ids = []
            if rid in result.draft_token_ids and finish is None:
                self.update_draft_token_ids({rid: result.draft_token_ids[rid]})
            outputs.append(RequestOutput(rid, new_tokens, finish))
            if finish is not None:
                self._finish(req, finish)
        return outputs

    def _kv_load_failed(self, req: LlmRequest) -> None:
        """Nothing of the step landed; a first chunk gives its blocks back and starts over."""
        req.draft_tokens.clear()
        req.request.spec_token_ids = []
        if req.is_context_init_state and req.is_first_context_chunk:
            self.allocator.undo_first_chunk(req)

    def _finish(self, req: LlmRequest, status: RequestStatus) -> None:
        """GENERATION_COMPLETE: free the KV and drop the request from the active list."""
        request = req.request
        req.state = LlmRequestState.GENERATION_COMPLETE
        request.status = status
        self.kv.free(request, request.last_sched_seq)  # deferred while a step may still write it
        self.kv.drop_request(request)
        self.active.remove(req)
        del self.requests[req.request_id]
        self.inflight.pop(req.request_id, None)
        self.finished_req_ids.append(req.request_id)

    def check_invariants(self) -> None:
        """KV conservation in the pool, plus each request's cursor, tokens and block table agree."""
        check_policy_invariants(self)
