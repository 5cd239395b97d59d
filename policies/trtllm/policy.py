"""The Policy adapter: PyExecutor's step around TensorRT-LLM's schedulers and KV cache manager -> StepPlan.

One `schedule()` is PyExecutor's step up to the forward pass (non-overlap executor loop):

1. new requests move from the executor queue into the active requests, up to
   `max_num_active_requests` (the max batch size per micro-batch); later ones wait unseen;
2. the capacity scheduler, then the micro-batch scheduler (`SimpleUnifiedScheduler`); the
   contexts are binned, non-last chunks first (`ScheduledRequests`);
3. the paused requests release their blocks (stored for reuse, tokens as they were) and are
   paused (`LlmRequest::pause`); they keep their place among the active requests;
4. `prepare_resources`: sequences for first chunks (prefix reuse moves the chunk's start),
   tokens for generations, re-binning, the token-budget trim.

`update_from_output` is the rest of the step: every context moves one chunk (its last chunk samples
a token), every generation samples; requests at their output cap finish and release their blocks
(in active order); then the blocks of contexts whose prompt is now complete are stored for reuse;
then the KV transfers that ended move their requests on (`cache_transceiver.py`: the disaggregated
states; between steps 2 and 3 the admitted DISAGG_GENERATION_INIT requests get their blocks and start
receiving, and step 4 turns the scheduled DISAGG_GENERATION_TRANS_COMPLETE ones into generations).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from ..plan import RequestOutput, StepPlan, StepResult
from ..request import Request, RequestStatus
from .block_keys import BlockKeys
from .cache_transceiver import CacheTransceiver
from .capacity import CapacityResult, CapacityScheduler, CapacitySchedulerPolicy, PeftBudget
from .chunking import ChunkingPolicy
from .config import TrtllmConfig
from .errors import SchedulerWedged
from .fastforward import TrtllmFastForward
from .invariants import check_policy_invariants
from .kv_accounting import KvAccounting
from .kv_cache_manager import KVCacheManager
from .lifecycle import advance_context, append_tokens, finish_after
from .micro_batch import ContextChunkingConfig, MicroBatchScheduler
from .pause import pause
from .resource_manager import ResourceManager
from .scheduled_requests import ScheduledRequests
from .state import LlmRequest, LlmRequestState, LlmRequestType
from .stats import TrtllmStats
from .wedge import wedge_message


class TrtllmPolicy:
    """TensorRT-LLM's SimpleUnifiedScheduler (capacity -> micro-batch) in PyExecutor's step."""

    def __init__(self, config: TrtllmConfig, capacity_policy: CapacitySchedulerPolicy) -> None:
        """Build the KV cache manager, the two scheduler levels and the bookkeeping."""
        self.config = config
        self.capacity_policy = capacity_policy
        # > 1: pipeline micro-batches in flight; the micro-batch scheduler skips their requests.
        self.max_concurrent_batches = config.num_micro_batches
        bs = config.block_size
        # max-requests is TensorRT-LLM without a KV cache manager: no reuse, nothing consulted, never
        # short; the pool only hands out block tables to execute the batch (growing past its size).
        has_kv_manager = capacity_policy is not CapacitySchedulerPolicy.MAX_REQUESTS
        self.keys = BlockKeys(bs)
        self.kv = KVCacheManager(
            config.num_gpu_blocks - 1,
            bs,
            config.max_model_len,
            enable_block_reuse=config.enable_prefix_caching and has_kv_manager,
            enable_partial_reuse=config.enable_partial_reuse,
            copy_on_partial_reuse=config.copy_on_partial_reuse,
            growable=not has_kv_manager,
        )
        self.acct = KvAccounting(self.kv, self.keys) if has_kv_manager else None
        peft = (
            None
            if config.max_peft_pages is None
            else PeftBudget(config.max_peft_pages, config.peft_pages_per_adapter)
        )
        self.capacity = CapacityScheduler(
            capacity_policy,
            config.effective_max_batch_size,
            self.acct,
            two_steps_look_ahead=config.two_step_lookahead,
            prefix_aware=config.enable_prefix_aware_scheduling,
            variable_window=config.variable_window_attention,
            peft=peft,
            started_contexts_in_first_pass=config.started_contexts_in_first_pass,
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
        self.resources = ResourceManager(
            self.kv,
            self.keys,
            self.stats,
            config.effective_max_num_tokens,
            config.enable_chunked_prefill,
            has_kv_manager=has_kv_manager,
        )
        self.transceiver = CacheTransceiver(self.resources, self.keys)
        self.max_num_active_requests = config.effective_max_batch_size * config.num_micro_batches
        self.max_input_len = config.effective_max_input_len  # (a config property: read once)
        self.waiting: deque[LlmRequest] = deque()  # the executor queue: not yet seen by the schedulers
        self.active: list[LlmRequest] = []
        self.num_started = 0  # active requests run since their (re)admission (`has_run`)
        self.requests: dict[str, LlmRequest] = {}
        # inflight_req_ids: requests in a step still on the device (what it computes for each: its
        # LlmRequest's scheduled_tokens and scheduled_drafts)
        self.inflight: set[str] = set()
        # whether any request may hold spec_token_ids (drafts attached, or brought in): until
        # then a landed step need not read each request's list (a cache miss per request)
        self.spec_ids_attached = False
        self.release_after_step: dict[str, LlmRequest] = {}  # aborted while their step runs
        self.finished_req_ids: list[str] = []  # reported in the next plan
        self.iter_counter = 0  # PyExecutor's: the plan's step id
        self.last_capacity: CapacityResult | None = None  # the last step's capacity pass (invariants)

    # ---- queue ----
    def _snapshot_points(self, prompt_len: int) -> tuple[int, ...]:
        """force-chunk's expected snapshot points (state caching of linear attention; none by default)."""
        step = self.config.snapshot_interval
        if step is None or self.config.chunking_policy != ChunkingPolicy.FORCE_CHUNK.value:
            return ()
        return tuple(range(step, prompt_len, step))

    def add_request(self, request: Request) -> None:
        """Enqueue; a prompt over max_input_len is rejected as TensorRT-LLM's executor does.

        A generation-only request may carry the token its context phase sampled as its one output
        token (context_phase_params.first_gen_tokens); it is held back until the KV has arrived.
        """
        cfg = self.config
        if request.request_id in self.requests:
            raise ValueError(f"request {request.request_id}: request_id already queued")
        if request.prompt_len > self.max_input_len:
            raise ValueError(
                f"request {request.request_id}: prompt_len {request.prompt_len} exceeds "
                f"max_input_len {self.max_input_len}"
            )
        kind = self._request_type(request)
        first_gen_token = -1
        if kind is LlmRequestType.GENERATION_ONLY and len(request.output_token_ids) == 1:
            first_gen_token = request.output_token_ids.pop()
        if (
            request.status is not RequestStatus.WAITING
            or request.num_computed_tokens
            or request.output_token_ids
        ):
            raise ValueError(f"request {request.request_id}: status must be WAITING with no computed tokens")
        max_new = min(request.max_tokens, cfg.max_model_len - request.prompt_len)
        self.spec_ids_attached = self.spec_ids_attached or bool(request.spec_token_ids)
        req = LlmRequest.from_request(request, max_new, self._snapshot_points(request.prompt_len))
        if kind is not LlmRequestType.CONTEXT_AND_GENERATION:
            self._init_disagg(req, kind, first_gen_token)
        self.waiting.append(req)
        self.requests[request.request_id] = req

    def _request_type(self, request: Request) -> LlmRequestType:
        """Context-only or generation-only from `kv_transfer_params`; only a KV cache manager transfers."""
        params = request.kv_transfer_params
        if params is None:
            return LlmRequestType.CONTEXT_AND_GENERATION
        side = "context-only" if params.do_remote_decode else "generation-only"
        if self.acct is None:
            raise ValueError(
                f"request {request.request_id}: trtllm:{self.capacity_policy.value} runs without a KV "
                f"cache manager, so TensorRT-LLM has no cache transceiver to serve a {side} request "
                "(kv_transfer_params); use a KV-aware capacity policy"
            )
        if params.do_remote_decode:
            return LlmRequestType.CONTEXT_ONLY
        return LlmRequestType.GENERATION_ONLY

    def _init_disagg(self, req: LlmRequest, kind: LlmRequestType, first_gen_token: int) -> None:
        """A generation-only request waits in DISAGG_GENERATION_INIT; its first token is already out."""
        req.llm_request_type = kind
        if kind is LlmRequestType.GENERATION_ONLY:
            if req.max_new_tokens < 2:
                raise ValueError(
                    f"request {req.request_id}: a generation-only request needs room for 2 output "
                    f"tokens (max_tokens and max_model_len leave {req.max_new_tokens}): the context "
                    "phase sampled the first"
                )
            req.state = LlmRequestState.DISAGG_GENERATION_INIT
            req.first_gen_token = first_gen_token
            req.num_delivered = 1

    def activate_new_requests(self) -> None:
        """_fetch_and_activate_new_requests: the executor queue fills the active set up to its cap."""
        waiting, active = self.waiting, self.active
        while waiting and len(active) < self.max_num_active_requests:
            active.append(waiting.popleft())

    def abort_requests(self, request_ids: Iterable[str]) -> list[Request]:
        """Finish live requests as aborted and release their KV (after their step, if one runs)."""
        aborted = []
        for rid in request_ids:
            req = self.requests.get(rid)
            if req is not None:
                self.finish_request(req, RequestStatus.FINISHED_ABORTED)
                aborted.append(req.request)
        return aborted

    def has_kv_transfers_in_flight(self) -> bool:
        """A KV receive or send has not ended (SupportsKVTransfer): an idle engine waits for it."""
        return self.transceiver.has_transfers_in_flight()

    def decode_takes_prefill_token(self) -> bool:
        """A generation-only request starts from the context phase's token (first_gen_tokens)."""
        return True

    def has_unfinished_requests(self) -> bool:
        """Anything still queued, active or paused."""
        return bool(self.active) or bool(self.waiting)

    def has_requests(self) -> bool:
        """Unfinished requests, or finishes not yet reported in a plan."""
        return bool(self.active) or bool(self.waiting) or bool(self.finished_req_ids)

    def get_request_counts(self) -> tuple[int, int]:
        """(running, waiting): running = admitted and executed since its last (re)admission."""
        running = self.num_started
        return running, len(self.active) + len(self.waiting) - running

    def kv_usage(self) -> float:
        """Fraction of usable blocks held."""
        return self.kv.usage

    def fast_forward(self) -> TrtllmFastForward:
        """Exact fast-forward of steady generation stretches (SupportsFastForward)."""
        return TrtllmFastForward(self)

    def run_counters(self) -> dict[str, int]:
        """The run summary's count of prefix-aware skips (no table has a row per skip)."""
        return {"num_prefix_skips": self.stats.num_prefix_skips}

    def budgets_adapters(self) -> bool:
        """An adapter cache is configured (max_peft_pages): new adapters' pages are budgeted."""
        return self.capacity.peft is not None

    def update_draft_token_ids(self, drafts: Mapping[str, list[int]]) -> None:
        """Attach drafts for the next step: at most the spec profile, and never past max_new_tokens."""
        for rid, ids in drafts.items():
            req = self.requests.get(rid)
            if req is not None and req.is_generation_in_progress_state:
                room = req.max_new_tokens - req.max_num_generated_tokens - 1
                req.draft_tokens = tuple(ids[: max(min(req.request.num_spec_tokens, room), 0)])
                req.request.spec_token_ids = list(req.draft_tokens)
                self.spec_ids_attached = self.spec_ids_attached or bool(req.draft_tokens)

    # ---- scheduling ----
    def schedule(self) -> StepPlan:
        """Activate, schedule (capacity -> micro-batch), pause, prepare resources -> StepPlan."""
        step = self.iter_counter
        plan = StepPlan(step_id=step)
        plan.block_table = self.kv.get_block_ids
        plan.finished_req_ids, self.finished_req_ids = self.finished_req_ids, []
        tc = self.transceiver
        if tc.to_send:
            plan.kv_reqs_to_send = tc.take_to_send()
        self.activate_new_requests()
        cap = self.last_capacity = self.capacity.schedule(self.active, self.inflight)
        self.stats.num_prefix_skips += cap.num_prefix_skipped
        micro = self.micro.schedule(cap.fitting, self.inflight)
        batch = ScheduledRequests(generation_requests=micro.generation_requests, paused_requests=cap.paused)
        batch.reset_context_requests(micro.context_requests)
        if cap.fitting_disagg_gen_init:
            tc.recv_gen_cache(cap.fitting_disagg_gen_init, plan, step)
        for victim in cap.paused:
            self._pause(victim, plan)
        if tc.complete:
            tc.transmission_complete(batch.generation_requests)
        self.resources.prepare_resources(batch, step)
        plan.kv_block_copies = self.kv.drain_copies()
        scheduled = batch.all_requests()
        for req in scheduled:
            self._add_to_plan(req, plan)
        self.inflight.update(plan.num_scheduled_tokens)  # (one C-level pass: no call per request)
        # the scheduled table's copy, overwritten: cheaper than inserting (docs/compiled-core.md, "Dicts")
        contexts = plan.context_lens = plan.num_scheduled_tokens.copy()
        for req in scheduled:
            contexts[req.request_id] = req.request.num_computed_tokens
        if (
            batch.is_empty
            and self.active
            and not self.inflight
            and self.acct is not None
            and not tc.has_transfers_in_flight()
        ):
            ids, message = wedge_message(self, step)
            raise SchedulerWedged(step, ids, message)
        self.iter_counter += 1
        self.stats.num_steps += 1
        return plan

    def _pause(self, req: LlmRequest, plan: StepPlan) -> None:
        """Release the blocks (stored with the tokens as they are), then LlmRequest::pause."""
        self.transceiver.forget(req.request_id)
        self.resources.free_resources(req)
        if req.has_run:
            self.num_started -= 1
        lost = pause(req, self.max_input_len)
        self.keys.truncate(req.request_id, req.prompt_len)
        req.expected_snapshot_points = self._snapshot_points(req.prompt_len)
        plan.paused_req_ids.append(req.request_id)
        self.stats.num_pauses += 1
        self.stats.num_truncated_tokens += lost

    def _add_to_plan(self, req: LlmRequest, plan: StepPlan) -> None:
        """Record one scheduled request: its tokens, drafts and first-step status."""
        request, rid = req.request, req.request_id
        generation = req.is_generation_in_progress_state
        base = 1 if generation else req.context_chunk_size
        drafts = req.num_draft_tokens if (generation or req.is_last_context_chunk) else 0
        plan.num_scheduled_tokens[rid] = base + drafts
        plan.total_num_scheduled_tokens += base + drafts
        if drafts:
            plan.spec_decode_tokens[rid] = list(req.draft_tokens)
        if not req.has_run:  # new or resumed: WAITING or PREEMPTED until its first step
            if request.status is RequestStatus.WAITING:
                plan.new_req_ids.append(rid)
            elif request.status is RequestStatus.PREEMPTED:
                plan.resumed_req_ids.append(rid)
            request.status = RequestStatus.RUNNING
            req.has_run = True
            self.num_started += 1
        req.scheduled_tokens, req.scheduled_drafts = base, drafts

    # ---- results ----
    def update_from_output(self, plan: StepPlan, result: StepResult) -> list[RequestOutput]:
        """Advance chunks, sample, finish (releasing KV in active order), rewind drafts, store contexts."""
        outputs: list[RequestOutput] = []
        finishing: dict[str, RequestStatus] = {}
        contexts: list[LlmRequest] = []
        rewinds: list[tuple[LlmRequest, int]] = []
        failed_kv_load_ids = result.failed_kv_load_ids
        draft_token_ids = result.draft_token_ids
        max_model_len = self.config.max_model_len
        # the step has landed: its requests leave the in-flight set (one C-level pass); a live one
        # was in it exactly when it has tokens scheduled (`check_policy_invariants`), so that is
        # what each asks below (a finished one left it, and a re-added id has none scheduled)
        self.inflight.difference_update(plan.num_scheduled_tokens)
        for rid in plan.num_scheduled_tokens:
            req = self.requests.get(rid)
            if req is None or req.scheduled_tokens == 0:
                gone = self.release_after_step.pop(rid, None)
                if gone is not None:
                    self.resources.release_finished(gone)
                    self.keys.drop(rid)
                continue
            base, drafts = req.scheduled_tokens, req.scheduled_drafts
            req.scheduled_tokens = req.scheduled_drafts = 0
            if failed_kv_load_ids and rid in failed_kv_load_ids:
                self._kv_load_failed(req, drafts)
                continue  # nothing computed: the same tokens are scheduled again
            sampled = result.sampled_token_ids.get(rid)
            if sampled is None:
                sampled = []
            accepted = min(max(len(sampled) - 1, 0), drafts)
            self.stats.num_computed_tokens += base + accepted
            if req.is_generation_in_progress_state:
                req.request.num_computed_tokens += base + accepted
                if drafts > accepted:
                    rewinds.append((req, drafts - accepted))
            else:
                contexts.append(req)
                before = req.request.num_recomputed_tokens
                done = advance_context(req, base)
                self.stats.num_recomputed_tokens += req.request.num_recomputed_tokens - before
                if not done:
                    continue  # a non-last chunk samples nothing
                req.request.num_computed_tokens += accepted
            if accepted + 1 < len(sampled):
                sampled = sampled[: accepted + 1]  # the rejected drafts' tokens are not kept
            outs = req.request.output_token_ids
            if len(sampled) == 1 and req.num_delivered == len(outs):  # append_tokens' common case
                objs: list[Any] = sampled  # append the sampled object (an int would be boxed anew)
                outs.append(objs[0])
                req.num_delivered += 1
                new_tokens, finish = sampled, finish_after(req, sampled[0], max_model_len)
            else:
                new_tokens, finish = append_tokens(req, sampled, max_model_len)
            if finish is None and req.is_context_only_request:
                finish = RequestStatus.FINISHED_LENGTH_CAPPED  # the context phase is all it runs
            if req.draft_tokens:
                req.draft_tokens = ()
            if self.spec_ids_attached and req.request.spec_token_ids:
                req.request.spec_token_ids = []
            if draft_token_ids and rid in draft_token_ids and finish is None:
                self.update_draft_token_ids({rid: draft_token_ids[rid]})
            outputs.append(RequestOutput(rid, new_tokens, finish))
            if finish is not None:
                finishing[rid] = finish
        if finishing:
            for req in [r for r in self.active if r.request_id in finishing]:
                if req.is_context_only_request:
                    self._finish_context_only(req, finishing[req.request_id])
                else:
                    self.finish_request(req, finishing[req.request_id])
        for req, n in rewinds:
            if req.request_id in self.requests:
                for _i in range(n):
                    self.kv.remove_token(req.request_id)
        self.resources.update_resources(contexts)
        if self.transceiver.has_transfers_in_flight():
            self._end_transfers(result, outputs)
        return outputs

    def _end_transfers(self, result: StepResult, outputs: list[RequestOutput]) -> None:
        """Transfers that ended: failed receives finish with an error, received KV lets a request
        generate, a finished send frees the context side's blocks."""
        tc = self.transceiver
        if result.failed_kv_load_ids:
            for req in tc.failed_recving(result.failed_kv_load_ids):
                self.finish_request(req, RequestStatus.FINISHED_ERROR)
                outputs.append(RequestOutput(req.request_id, [], RequestStatus.FINISHED_ERROR))
        if result.finished_recving:
            tc.finished_recving(result.finished_recving)
        if result.finished_sending:
            tc.finished_sending(result.finished_sending)

    def _finish_context_only(self, req: LlmRequest, status: RequestStatus) -> None:
        """Finished for the client, but its blocks stay held until the decode side has read them."""
        request, rid = req.request, req.request_id
        request.status = status
        self.active.remove(req)
        if req.has_run:
            self.num_started -= 1
        del self.requests[rid]
        self.finished_req_ids.append(rid)
        self.transceiver.send_ctx_cache(req)

    def _kv_load_failed(self, req: LlmRequest, drafts: int) -> None:
        """Nothing of the step landed: a first chunk gives its blocks back, a generation its tokens."""
        req.draft_tokens = ()
        req.request.spec_token_ids = []
        if req.is_context_init_state and req.is_first_context_chunk:
            self.resources.undo_sequence(req)
        elif req.is_generation_in_progress_state:
            for _i in range(1 + drafts):
                self.kv.remove_token(req.request_id)

    def finish_request(self, req: LlmRequest, status: RequestStatus) -> None:
        """GENERATION_COMPLETE: release the KV (after its step or transfer if one runs) and leave the
        active list; a failed transfer's blocks are released unstored (no KV arrived)."""
        request, rid = req.request, req.request_id
        failed = req.state == LlmRequestState.DISAGG_TRANS_ERROR
        receiving = self.transceiver.defer_release(req)  # the transfer still writes the blocks
        self.transceiver.forget(rid)
        req.state = LlmRequestState.GENERATION_COMPLETE
        request.status = status
        if rid in self.inflight and not receiving:
            self.release_after_step[rid] = req  # its step still writes the blocks
        elif failed:
            self.kv.remove_sequence(rid, None)
            self.keys.drop(rid)
        elif not receiving:
            self.resources.release_finished(req)
            self.keys.drop(rid)
        if req in self.active:
            self.active.remove(req)
            if req.has_run:
                self.num_started -= 1
        else:
            self.waiting.remove(req)
        del self.requests[rid]
        self.inflight.discard(rid)
        self.finished_req_ids.append(rid)

    def check_invariants(self) -> None:
        """KV conservation in the pool, plus each request's cursor, tokens and block table agree."""
        check_policy_invariants(self)
