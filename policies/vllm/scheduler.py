"""`vllm`: vLLM 0.33.0's V1 `Scheduler` (vllm/v1/core/sched/scheduler.py), method for method.

One step: `schedule()` gives the RUNNING requests what they still need first (preempting from
the back, or the lowest priority, when the KV cache is short), then admits WAITING requests in
queue order while the token budget, the seats and the KV cache allow, and advances every
scheduled request's `num_computed_tokens` optimistically (`_update_after_schedule`).
`update_from_output` then appends each request's sampled tokens, rolls back rejected drafts,
stops requests (EOS, stop tokens, max_tokens, max_model_len) and frees them. The names are
vLLM's, so the two read side by side; `AsyncScheduler` (async_scheduler.py) overrides only the
post-schedule hook. What the simulator adds (exact fast-forward) is a companion object
(fastforward.py), not part of this class.

With a KV connector (`VllmConfig.kv_role`, kv_connector.py) the scheduler serves either side of a
prefill/decode pair as vLLM's does: a remote prefill is admitted into WAITING_FOR_REMOTE_KVS with
its blocks allocated and waits in `kv_holding_waiting` (scanned before `waiting`) until a
StepResult's `finished_recving` names it; a finished remote-decode request keeps its blocks (it
stays in `requests`, finished) until `finished_sending` names it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from ..kv_cache import KVCacheManager
from ..plan import GrammarOutput, RequestOutput, StepPlan, StepResult
from ..recompute import count_recompute, mark_frontier
from ..request import Request, RequestStatus
from .config import VllmConfig
from .fastforward import VllmFastForward
from .kv_connector import NixlConnectorScheduler
from .request_queue import create_request_queue
from .structured_output import StructuredOutputManager
from .utils import check_stop


class _StepState:
    """Budgets and per-step lists of one schedule() call."""

    __slots__ = (
        "token_budget",
        "input_budget",
        "num_scheduled",
        "spec",
        "scheduled_running",
        "preempted",
        "new",
        "resumed",
        "admitted",
        "prefill_scheduled",
        "threshold",
    )

    def __init__(self, budget: int, threshold: int) -> None:
        self.token_budget = budget
        self.input_budget = budget
        self.num_scheduled: dict[str, int] = {}
        self.spec: dict[str, list[int]] = {}
        self.scheduled_running: list[Request] = []
        self.preempted: list[Request] = []
        self.new: list[Request] = []
        self.resumed: list[Request] = []
        self.admitted: list[Request] = []  # new and resumed, in admission order
        self.prefill_scheduled = False
        self.threshold = threshold


class Scheduler:
    """Synchronous V1 scheduler: schedule step s, then update from step s."""

    max_concurrent_batches = 1

    def __init__(self, config: VllmConfig) -> None:
        if config.is_kv_consumer and self.max_concurrent_batches > 1 and not config.defer_block_free:
            # vLLM: a load may refill a freed block an in-flight step still writes
            config = replace(config, defer_block_free=True)
        self.config = config
        # lazy_private: a vLLM request looks up blocks only while it holds none (see KVCacheManager)
        self.kv = KVCacheManager(
            config.num_gpu_blocks,
            config.block_size,
            config.max_model_len,
            config.enable_prefix_caching,
            config.watermark,
            lazy_private=True,
        )
        self.requests: dict[str, Request] = {}
        self.running: list[Request] = []
        self.waiting = create_request_queue(config.scheduling_policy)
        # waiting requests that hold KV blocks (remote loads): always scanned before `waiting`
        self.kv_holding_waiting = create_request_queue(config.scheduling_policy)
        self.priority = config.scheduling_policy == "priority"
        self.max_num_active = config.max_num_active_seqs or config.max_num_seqs
        self.num_spec_tokens = config.num_spec_tokens
        # draft_model: k KV slots past the scheduled tokens, one more input slot per request
        self.num_lookahead_tokens = config.num_lookahead_tokens
        self.draft_slots = config.max_num_new_slots_for_drafting
        self.structured_output_manager = StructuredOutputManager(config.num_spec_tokens)
        # reported in the next plan, then cleared (vLLM's sets, kept in order here)
        self.finished_req_ids: list[str] = []
        self.preempted_req_ids: list[str] = []
        # request id -> num_computed_tokens it had before its latest preemption (recompute count)
        self.recompute_frontier: dict[str, int] = {}
        self.current_step = 0
        # KV connector (prefill/decode disaggregation); None without kv_role
        self.connector = NixlConnectorScheduler(config.kv_role) if config.kv_role is not None else None
        self.recompute_kv_load_failures = (
            self.connector is None or config.kv_load_failure_policy == "recompute"
        )
        # a producer hands KV off when a request completes: a preempted request's in-flight
        # output is dropped (it must not finish and hand off the blocks the preemption freed)
        self.requires_kv_delivery = config.is_kv_producer
        self.drop_stale_output_req_ids: set[str] = set()
        # remote loads that ended (finished_recving) and, of those, the ones that failed
        self.finished_recving_kv_req_ids: set[str] = set()
        self.failed_recving_kv_req_ids: set[str] = set()
        # requests still prefilling (or loading): their remaining blocks are reserved against
        # the admission of an async load (kept only with a connector, where it is read)
        self._inflight_prefills: set[Request] = set()
        k = config.num_spec_tokens
        self._spec_decode_step_blocks = (
            -(-(1 + k + self.num_lookahead_tokens) // config.block_size) if k else 0
        )

    # ---------------------------------------------------------------- schedule
    def schedule(self) -> StepPlan:
        """Plan one step: running requests first, then admissions if nothing was preempted."""
        self.current_step += 1
        cfg = self.config
        num_eligible = len(self.running) + len(self.waiting) + len(self.kv_holding_waiting)
        threshold = cfg.long_prefill_token_threshold if num_eligible > 1 else 0
        if threshold > 0 and cfg.long_prefill_token_threshold_adaptive:
            threshold = max(threshold, cfg.max_num_batched_tokens // num_eligible)
        st = _StepState(cfg.max_num_batched_tokens, threshold)
        self._schedule_running(st)
        if not st.preempted:
            self._schedule_waiting(st)
        assert len(self.running) <= cfg.max_num_seqs
        return self._make_plan(st)

    def _schedule_running(self, st: _StepState) -> None:
        """Give each running request what it still needs, preempting from the back on KV misses."""
        max_model_len = self.config.max_model_len
        running = self.running
        kv = self.kv
        num_scheduled, spec_out = st.num_scheduled, st.spec
        threshold = st.threshold
        token_budget, input_budget = st.token_budget, st.input_budget
        draft_slots, lookahead = self.draft_slots, self.num_lookahead_tokens
        # KV fast path (no append_slots when no block is needed and nothing new gets cached: most
        # decode steps); every other case goes through append_slots (allocate_slots with lookahead).
        req_index = 0
        while req_index < len(running) and token_budget > 0:
            request = running[req_index]
            if input_budget <= draft_slots:
                break
            placeholders = request.num_output_placeholders
            computed = request.num_computed_tokens
            if placeholders > 0 and (computed + 2 - placeholders >= request.prompt_len + request.max_tokens):
                req_index += 1  # async: the in-flight step already reaches max_tokens
                continue
            num_tokens = request.prompt_len + len(request.output_token_ids)
            num_new = num_tokens + len(request.spec_token_ids) + placeholders - computed
            if 0 < threshold < num_new:
                num_new = threshold
            if num_new > token_budget:
                num_new = token_budget
            if num_new > input_budget - draft_slots:
                num_new = input_budget - draft_slots
            if num_new > max_model_len - computed - 1:
                num_new = max_model_len - computed - 1
            if num_new <= 0:
                req_index += 1  # fully scheduled but not yet processed: let others run
                continue
            rid = request.request_id
            if kv.holds_new_tokens(rid, computed + num_new + lookahead, num_tokens):
                pass  # the request's blocks already hold the new tokens (and the lookahead)
            elif not (
                kv.append_slots(request, num_new)
                if not lookahead
                else kv.allocate_slots(request, num_new, num_lookahead_tokens=lookahead) is not None
            ):
                st.token_budget, st.input_budget = token_budget, input_budget
                ok, req_index = self._allocate_or_preempt(st, request, num_new, req_index)
                token_budget, input_budget = st.token_budget, st.input_budget
                if not ok:
                    if self.priority and request.status == RequestStatus.PREEMPTED:
                        continue  # it preempted itself; later ones have higher priority
                    break
            st.scheduled_running.append(request)
            if request.is_prefill_chunk:
                st.prefill_scheduled = True
            num_scheduled[rid] = num_new
            token_budget -= num_new
            input_budget -= num_new + draft_slots
            if self.recompute_frontier:
                count_recompute(self.recompute_frontier, request, num_new, computed)
            req_index += 1
            if request.spec_token_ids:
                n_spec = num_new + computed - num_tokens - placeholders
                if n_spec > 0:
                    spec_out[rid] = request.spec_token_ids[:n_spec]
                request.spec_token_ids = []
        st.token_budget, st.input_budget = token_budget, input_budget

    def _allocate_or_preempt(
        self, st: _StepState, request: Request, num_new: int, req_index: int
    ) -> tuple[bool, int]:
        """After a failed allocate_slots: preempt victims (last running / lowest priority) until it fits."""
        running = self.running
        lookahead = self.num_lookahead_tokens
        if self.kv.allocate_slots(request, num_new, num_lookahead_tokens=lookahead) is not None:
            return True, req_index
        while True:
            if self.priority:
                victim = max(running, key=lambda r: (r.priority, r.arrival_time))
            else:
                victim = running[-1]
            if not self._request_blocks_can_be_freed(victim):
                return False, req_index
            if self.priority:
                vi = running.index(victim)
                del running[vi]
                if vi < req_index:
                    req_index -= 1
                n = st.num_scheduled.pop(victim.request_id, None)
                if n is not None:  # already scheduled this step: give its budget back
                    st.scheduled_running.remove(victim)
                    st.token_budget += n
                    st.input_budget += n + self.draft_slots
                    st.spec.pop(victim.request_id, None)
            else:
                running.pop()
            self._preempt_request(victim)
            st.preempted.append(victim)
            if victim is request:
                return False, req_index
            if self.kv.allocate_slots(request, num_new, num_lookahead_tokens=lookahead) is not None:
                return True, req_index

    def _preempt_request(self, request: Request) -> None:
        """Recompute preemption: drop KV, mark in-flight output stale, back to the front of waiting."""
        assert request.status == RequestStatus.RUNNING, "only running requests can be preempted"
        mark_frontier(self.recompute_frontier, request.request_id, request.num_computed_tokens)
        self._free_request_blocks(request)
        if self.connector is not None:
            self._inflight_prefills.discard(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        if request.spec_token_ids:
            request.spec_token_ids = []
        request.num_stale_output_tokens = request.num_in_flight_tokens
        if self.requires_kv_delivery and request.num_stale_output_tokens:
            self.drop_stale_output_req_ids.add(request.request_id)
        request.num_output_placeholders = 0
        request.num_preemptions += 1
        self.waiting.prepend_request(request)
        self.preempted_req_ids.append(request.request_id)

    def _schedule_waiting(self, st: _StepState) -> None:
        """Admit waiting requests in queue order until budget, seats or KV run out (no preemption);
        requests still compiling their grammar, loading remote KV or with stale output in flight
        are skipped in place. Requests holding blocks (`kv_holding_waiting`) come first."""
        cfg = self.config
        waiting = self.waiting
        holding = self.kv_holding_waiting
        connector = self.connector
        skipped: list[Request] = []
        skipped_holding: list[Request] = []
        k = self.num_spec_tokens
        draft_slots = self.draft_slots
        while st.token_budget > 0:
            queue = holding if len(holding) else waiting
            if not queue or st.input_budget <= draft_slots or len(self.running) >= self.max_num_active:
                break
            request = queue.peek_request()
            if not self._handle_blocked_waiting_request(request) or (
                request.num_stale_output_tokens and request.request_id not in self.drop_stale_output_req_ids
            ):
                # its grammar is not compiled, its remote KV not loaded, or its in-flight output
                # (to be delivered) has not come back yet
                queue.pop_request()
                (skipped_holding if self._holds_kv_blocks(request) else skipped).append(request)
                continue
            num_external = 0
            load_kv_async = False
            if request.num_computed_tokens == 0:
                hit, num_local = self.kv.get_computed_blocks(request)
                if connector is not None:
                    # our local hits are whole blocks: the hit is already block-aligned
                    num_external, load_kv_async = connector.get_num_new_matched_tokens(request, num_local)
                num_computed = num_local + num_external
            else:
                # remote KV loaded (the request holds its blocks): compute what is left
                hit, num_local = [], 0
                num_computed = request.num_computed_tokens
            pad = False
            if load_kv_async:
                num_new = 0  # loading remote KV: no compute this step
            else:
                budget = min(st.token_budget, st.input_budget - draft_slots)  # request_token_budget
                num_new = request.num_tokens - num_computed
                if (
                    k > 0
                    and num_new == 1
                    and not st.prefill_scheduled
                    and (st.scheduled_running or num_computed > 0)
                    and num_computed + 1 + k + 1 <= cfg.max_model_len
                ):
                    if 1 + k > budget:
                        break
                    num_new, pad = 1 + k, True
                if 0 < st.threshold < num_new:
                    num_new = st.threshold
                if not cfg.enable_chunked_prefill and num_new > budget:
                    break
                num_new = min(num_new, budget)
            reserved = 0
            if load_kv_async:
                # a load holds its blocks with no progress: leave in-flight prefills their blocks
                reserved = self._inflight_prefill_reserved_blocks() + self._spec_decode_step_blocks
            if (
                self.kv.allocate_slots(
                    request,
                    num_new,
                    num_local,
                    hit,
                    num_lookahead_tokens=0 if load_kv_async else self.num_lookahead_tokens,
                    full_sequence_must_fit=cfg.scheduler_reserve_full_isl,
                    has_scheduled_reqs=bool(self.running),
                    num_external_computed_tokens=num_external,
                    delay_cache_blocks=load_kv_async,
                    reserved_blocks=reserved,
                )
                is None
            ):
                break
            if connector is not None:
                connector.update_state_after_alloc(request, num_external)
            if load_kv_async:
                # KV arrives between steps; num_computed_tokens counts it already
                request.status = RequestStatus.WAITING_FOR_REMOTE_KVS
                request.num_computed_tokens = num_computed
                self._inflight_prefills.add(request)
                queue.pop_request()
                skipped_holding.append(request)
                continue
            queue.pop_request()
            self.running.append(request)
            (st.new if request.status == RequestStatus.WAITING else st.resumed).append(request)
            st.admitted.append(request)
            request.status = RequestStatus.RUNNING
            request.num_computed_tokens = num_computed
            self._record(st, request, num_new, num_computed)
            if connector is not None and num_computed + num_new < request.num_tokens:
                self._inflight_prefills.add(request)
            if pad:
                # vLLM 0.33.0 asserts here: 0 < long_prefill_token_threshold < 1 + k cuts the
                # padded admission, and the engine dies
                assert num_new == 1 + k, (
                    f"{request.request_id}: padded admission of {num_new} "
                    f"tokens, not 1 + num_spec_tokens = {1 + k} (vLLM asserts)"
                )
                st.spec[request.request_id] = [-1] * k
        if skipped_holding:
            holding.prepend_requests(skipped_holding)
        if skipped:
            waiting.prepend_requests(skipped)

    @staticmethod
    def _holds_kv_blocks(request: Request) -> bool:
        """A waiting request with blocks: loaded KV, or a load in flight (whose failure resets
        num_computed_tokens before the blocks are freed)."""
        return request.num_computed_tokens > 0 or request.status == RequestStatus.WAITING_FOR_REMOTE_KVS

    def _inflight_prefill_reserved_blocks(self) -> int:
        """Blocks the in-flight prefills (and loads) still need for their whole sequence."""
        bs = self.config.block_size
        extra = 1 + self.num_spec_tokens + self.num_lookahead_tokens if self.num_spec_tokens else 0
        max_model_len = self.config.max_model_len
        total = 0
        for request in self._inflight_prefills:
            n = min(request.num_tokens, max_model_len) + extra
            total += max(-(-n // bs) - len(self.kv.get_block_ids(request.request_id)), 0)
        return total

    def _handle_blocked_waiting_request(self, request: Request) -> bool:
        """True if the waiting request may be scheduled; a structured request leaves
        WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR, and a remote load WAITING_FOR_REMOTE_KVS, only
        here, when a scan reaches it compiled / loaded."""
        status = request.status
        if status == RequestStatus.WAITING_FOR_REMOTE_KVS:
            if request.request_id not in self.finished_recving_kv_req_ids:
                return False
            self._update_waiting_for_remote_kv(request)
            request.status = RequestStatus.PREEMPTED if request.num_preemptions else RequestStatus.WAITING
        elif status == RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR:
            if not request.grammar_ready:
                return False
            request.status = RequestStatus.WAITING
        return True

    def _update_waiting_for_remote_kv(self, request: Request) -> None:
        """The load ended: publish the loaded blocks (a failed load keeps what is valid, or frees
        them all), and recompute the last prompt token when every token came from outside."""
        rid = request.request_id
        if rid in self.failed_recving_kv_req_ids:
            if request.num_computed_tokens:
                self.kv.cache_blocks(request, request.num_computed_tokens)
            else:
                self.kv.free(request)  # nothing valid: a local prefix hit may serve the retry
            self.failed_recving_kv_req_ids.remove(rid)
        else:
            self.kv.cache_blocks(request, request.num_computed_tokens)
        if request.num_computed_tokens == request.num_tokens:
            request.num_computed_tokens = request.num_tokens - 1
        self.finished_recving_kv_req_ids.remove(rid)

    def _record(self, st: _StepState, request: Request, num_new: int, context: int) -> None:
        """Charge the budgets for an admitted request."""
        rid = request.request_id
        st.num_scheduled[rid] = num_new
        st.token_budget -= num_new
        st.input_budget -= num_new + self.draft_slots
        if self.recompute_frontier:
            count_recompute(self.recompute_frontier, request, num_new, context)

    def _make_plan(self, st: _StepState) -> StepPlan:
        """Fill the StepPlan, advance the fence and the optimistic counters."""
        assert st.token_budget >= 0
        total = self.config.max_num_batched_tokens - st.token_budget  # what the scheduled charged
        plan = StepPlan(
            step_id=self.current_step - 1,
            num_scheduled_tokens=st.num_scheduled,
            total_num_scheduled_tokens=total,
            # the contexts, filled by _update_after_schedule: a copy of a dict with the same keys,
            # overwritten, costs less than inserting them afresh (no resizing)
            context_lens=st.num_scheduled.copy(),
            spec_decode_tokens=st.spec,
            new_req_ids=[r.request_id for r in st.new],
            resumed_req_ids=[r.request_id for r in st.resumed],
            preempted_req_ids=self.preempted_req_ids,
            finished_req_ids=self.finished_req_ids,
        )
        plan.block_table = self.kv.get_block_ids
        if self.connector is not None:
            plan.kv_reqs_to_recv, plan.kv_reqs_to_send = self.connector.build_connector_meta()
        if self.config.defer_block_free and total > 0:
            self.kv.begin_step()
        scheduled = st.scheduled_running + st.admitted  # num_scheduled_tokens' order
        assert len(scheduled) == len(st.num_scheduled), "a scheduled request is in no list"
        self._update_after_schedule(plan, scheduled)
        return plan

    def _update_after_schedule(self, plan: StepPlan, scheduled: list[Request]) -> None:
        """The plan takes each request's context, then computed tokens advance at schedule time
        (optimistically); outputs settle later.

        `scheduled`: the plan's requests in the plan's order (the running, then the admitted), walked
        beside the plan's entries instead of looking each one up by id.
        """
        num_scheduled, context = plan.num_scheduled_tokens, plan.context_lens
        seq = self.kv.sched_step_seq if self.config.defer_block_free else None
        has_so = False
        j = 0
        for rid, n in num_scheduled.items():
            request = scheduled[j]
            j += 1
            assert request.request_id == rid, "scheduled out of the plan's order"
            context[rid] = request.num_computed_tokens  # before this step
            request.num_computed_tokens += n
            request.num_in_flight_tokens += n
            if seq is not None:
                request.last_sched_seq = seq
            request.is_prefill_chunk = request.num_computed_tokens < (
                request.num_tokens + request.num_output_placeholders
            )
            has_so |= request.structured_output and not request.is_prefill_chunk
        plan.has_structured_output_requests = has_so
        if self.connector is not None and self._inflight_prefills:
            for request in scheduled:
                if not request.is_prefill_chunk:
                    self._inflight_prefills.discard(request)
        self.finished_req_ids = []
        self.preempted_req_ids = []

    # ---------------------------------------------------------------- update
    def update_from_output(self, plan: StepPlan, result: StepResult) -> list[RequestOutput]:
        """Apply the result of `plan`; stale output of preempted requests is delivered, not counted."""
        if self.config.defer_block_free and plan.total_num_scheduled_tokens > 0:
            self.kv.end_step()
        requests = self.requests
        sampled = result.sampled_token_ids
        spec_tokens = plan.spec_decode_tokens
        cache_spec = self.num_spec_tokens > 0
        running_status = RequestStatus.RUNNING
        max_model_len = self.config.max_model_len
        caching = self.kv.enable_caching
        block_size = self.kv.block_size
        num_cached = self.kv.num_cached_block
        outputs: list[RequestOutput] = []
        stopped_running: set[Request] = set()
        stopped_waiting: set[Request] = set()
        failed = result.failed_kv_load_ids
        connector = self.connector
        recv_ended: set[str] = set()
        error_ids: list[str] = []
        if connector is not None and failed:
            recv_ended, error_ids = self._handle_failed_recving(failed)
        any_failed = len(failed) > 0
        for rid, n in plan.num_scheduled_tokens.items():
            request = requests.get(rid)
            if request is None:
                continue  # finished (aborted) while the step was in flight
            request.num_in_flight_tokens -= n
            stale_n = request.num_stale_output_tokens
            stale = stale_n > 0
            if stale:
                request.num_stale_output_tokens = stale_n - n
                assert stale_n >= n
            if any_failed and rid in failed:
                if self.recompute_kv_load_failures:
                    self._recompute_after_failed_load(request, stale)
                elif not stale and request.status == running_status:
                    error_ids.append(rid)
                continue
            if connector is not None:
                if request.is_finished:
                    continue  # finished, its blocks held for a KV transfer
                if stale and rid in self.drop_stale_output_req_ids:
                    if stale_n == n:
                        self.drop_stale_output_req_ids.discard(rid)
                    continue  # dropped, not delivered: the request recomputes it
            generated = sampled.get(rid)
            if generated is None or len(generated) == 0:
                continue  # a prefill chunk: nothing to deliver
            if spec_tokens and not stale:
                spec = spec_tokens.get(rid)
                if spec:
                    self._roll_back_rejected(request, len(spec) - max(len(generated) - 1, 0))
            status_before = request.status
            placeholders = request.num_output_placeholders
            had_placeholders = placeholders > 0
            if not stale and len(generated) == 1:
                # Common case: one token, no trimming possible.
                tok = generated[0]
                outs = request.output_token_ids
                objs: list[Any] = generated  # append the sampled object (`tok` would be boxed anew)
                outs.append(objs[0])
                num_out = len(outs)
                eos = request.eos_token_id
                stops = request.stop_token_ids
                stopped = (
                    (eos is not None and tok == eos and not request.ignore_eos)
                    or num_out >= request.max_tokens
                    or request.prompt_len + num_out >= max_model_len
                    or (len(stops) > 0 and tok in stops)
                )
                if stopped:
                    check_stop(request, max_model_len)
                if had_placeholders:
                    request.num_output_placeholders = placeholders - 1
                new_ids = generated  # the sampled list itself (one token, nothing trimmed)
            else:
                new_ids, stopped = self._update_request_with_output(request, list(generated), stale)
            if not stale and status_before == running_status and (had_placeholders or cache_spec):
                done = request.num_computed_tokens - request.num_in_flight_tokens
                if caching and done >= (num_cached.get(rid, 0) + 1) * block_size:  # done // bs > cached
                    self.kv.cache_blocks(request, done)
            if stopped:
                outputs.append(RequestOutput(rid, new_ids, request.status, stale))
                self._free_request(request)
                (stopped_running if status_before == running_status else stopped_waiting).add(request)
            else:
                outputs.append(RequestOutput(rid, new_ids, None, stale))
        if stopped_running:
            self.running = [r for r in self.running if r not in stopped_running]
        if stopped_waiting:
            self.waiting.remove_requests(stopped_waiting)
        if connector is not None:
            if error_ids:
                for request in self.finish_requests(error_ids, RequestStatus.FINISHED_ERROR):
                    outputs.append(RequestOutput(request.request_id, [], request.status))
            self._update_from_kv_xfer_finished(result, recv_ended)
        return outputs

    def _handle_failed_recving(self, failed: set[str]) -> tuple[set[str], list[str]]:
        """Failed remote loads: the load has ended (as NIXL reports a failed one in
        finished_recving too); recompute policy: nothing of it is valid, so the request restarts
        from token 0 once promoted; fail policy: the request fails. Returns (loads ended, ids to
        fail)."""
        ended: set[str] = set()
        to_fail: list[str] = []
        for rid in sorted(failed):
            request = self.requests.get(rid)
            if request is None:
                continue
            if request.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                ended.add(rid)
                if self.recompute_kv_load_failures:
                    request.num_computed_tokens = 0
                    self.failed_recving_kv_req_ids.add(rid)
                else:
                    to_fail.append(rid)
            elif request.is_finished and self._is_remote_prefill(request):
                ended.add(rid)  # aborted while loading: its blocks wait for the load's end
        return ended, to_fail

    @staticmethod
    def _is_remote_prefill(request: Request) -> bool:
        """Decode side of a prefill/decode pair."""
        params = request.kv_transfer_params
        return params is not None and params.do_remote_prefill

    def _update_from_kv_xfer_finished(self, result: StepResult, recv_ended: set[str]) -> None:
        """Transfers that ended: a loaded request may now be scheduled (the next waiting scan
        promotes it); a finished one (aborted while loading, or sent to its remote decode) frees
        its blocks. Ids this replica does not hold (a notification-only transfer) are ignored."""
        requests = self.requests
        for rid in sorted(result.finished_recving | recv_ended):
            request = requests.get(rid)
            if request is None:
                continue
            if request.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                self.finished_recving_kv_req_ids.add(rid)
            elif request.is_finished:
                self._free_blocks(request)
        for rid in sorted(result.finished_sending):
            request = requests.get(rid)
            if request is None:
                continue
            assert request.is_finished, f"{rid}: finished_sending for a request still {request.status.name}"
            self._free_blocks(request)

    def _recompute_after_failed_load(self, request: Request, stale: bool) -> None:
        """KV load failure, recompute policy: drop the step's output and recompute from token 0.

        The request keeps its blocks; outputs of its other in-flight steps become stale (as after
        a preemption) so they are delivered without touching the reset counters.
        """
        if stale or request.status != RequestStatus.RUNNING:
            return
        rid = request.request_id
        done = request.num_computed_tokens - request.num_in_flight_tokens  # its tokens before the failed step
        mark_frontier(self.recompute_frontier, rid, done)
        request.num_computed_tokens = 0
        request.num_stale_output_tokens = request.num_in_flight_tokens
        request.num_output_placeholders = 0
        request.spec_token_ids = []
        request.is_prefill_chunk = True

    @staticmethod
    def _roll_back_rejected(request: Request, rejected: int) -> None:
        """Rejected drafts: their KV positions and (async) placeholders are given back."""
        if request.num_computed_tokens > 0:
            request.num_computed_tokens -= rejected
        if request.num_output_placeholders > 0:
            request.num_output_placeholders -= rejected

    def _update_request_with_output(
        self, request: Request, new_ids: list[int], stale: bool
    ) -> tuple[list[int], bool]:
        """Append tokens one by one, stopping (and trimming) at the first stop condition."""
        num_returned = len(new_ids)
        outs = request.output_token_ids
        max_model_len = self.config.max_model_len
        stopped = False
        eos = None if request.ignore_eos else request.eos_token_id
        stops = request.stop_token_ids
        limit = min(request.max_tokens, max_model_len - request.prompt_len)
        for i, tok in enumerate(new_ids, 1):
            outs.append(tok)
            if (tok == eos or len(outs) >= limit or (stops and tok in stops)) and check_stop(
                request, max_model_len
            ):
                stopped = True
                trimmed = num_returned - i
                if not stale:
                    request.num_computed_tokens -= trimmed
                request.num_truncated_tokens += trimmed
                del new_ids[i:]
                break
        if not stale and request.num_output_placeholders > 0:
            request.num_output_placeholders -= num_returned
            assert request.num_output_placeholders >= 0, f"{request.request_id}: placeholders < 0"
        return new_ids, stopped

    # ---------------------------------------------------------------- requests in and out
    def add_request(self, request: Request) -> None:
        """Queue a new arrival: WAITING, or WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR with structured
        output (as vLLM's Request starts), promoted by the first waiting scan that finds its grammar
        compiled."""
        if request.request_id in self.requests:
            raise ValueError(f"duplicate request id {request.request_id!r}")
        if request.kv_transfer_params is not None and self.connector is None:
            raise ValueError(
                f"request {request.request_id!r} carries kv_transfer_params but VllmConfig.kv_role "
                "is None (no KV connector)"
            )
        if request.structured_output:
            request.status = RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR
        self.requests[request.request_id] = request
        self.waiting.add_request(request)

    def finish_requests(self, request_ids: Iterable[str], finished_status: RequestStatus) -> list[Request]:
        """The finish signal from outside the scheduler (a client abort): finish the live ones
        with `finished_status` and free them; finished or unknown ids are ignored."""
        assert finished_status.is_finished
        valid: list[Request] = []
        seen: set[str] = set()
        for rid in request_ids:
            request = self.requests.get(rid)
            if request is None or request.is_finished or rid in seen:
                continue
            seen.add(rid)
            valid.append(request)
        if not valid:
            return valid
        in_running = {r for r in valid if r.status == RequestStatus.RUNNING}
        if in_running:
            self.running = [r for r in self.running if r not in in_running]
        in_waiting = {r for r in valid if r not in in_running}
        if in_waiting:
            self.waiting.remove_requests(in_waiting)
            if len(self.kv_holding_waiting):
                self.kv_holding_waiting.remove_requests(in_waiting)
        for request in valid:
            delay_free_blocks = False
            if request.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                # the load is still running: its blocks are freed when it ends
                rid = request.request_id
                delay_free_blocks = rid not in self.finished_recving_kv_req_ids
                self.finished_recving_kv_req_ids.discard(rid)
                self.failed_recving_kv_req_ids.discard(rid)
            request.status = finished_status
            self._free_request(request, delay_free_blocks)
        return valid

    def abort_requests(self, request_ids: Iterable[str]) -> list[Request]:
        """The step interface's abort: EngineCore's finish_requests(ids, FINISHED_ABORTED)."""
        return self.finish_requests(request_ids, RequestStatus.FINISHED_ABORTED)

    def has_unfinished_requests(self) -> bool:
        """Requests still waiting (remote loads included) or running."""
        return bool(self.running) or len(self.waiting) > 0 or len(self.kv_holding_waiting) > 0

    def has_requests(self) -> bool:
        """Unfinished requests, finished ones not yet reported in a plan, or finished ones whose
        blocks a KV transfer still holds (vLLM's has_finished_requests)."""
        return self.has_unfinished_requests() or bool(self.finished_req_ids) or self._has_held_finished()

    def _has_held_finished(self) -> bool:
        """Finished requests kept in `requests` until a transfer ends."""
        if self.connector is None:
            return False
        num_running, num_waiting = self.get_request_counts()
        return len(self.requests) > num_running + num_waiting

    def decode_takes_prefill_token(self) -> bool:
        """The decode side recomputes the last prompt token and samples the first token itself."""
        return False

    def has_kv_transfers_in_flight(self) -> bool:
        """SupportsKVTransfer: a load (WAITING_FOR_REMOTE_KVS, not yet ended) or a send (blocks
        held by a finished request) is outstanding."""
        if self.connector is None:
            return False
        if self._has_held_finished():
            return True
        done = self.finished_recving_kv_req_ids
        for request in self.kv_holding_waiting:
            if request.status == RequestStatus.WAITING_FOR_REMOTE_KVS and request.request_id not in done:
                return True
        return False

    def get_request_counts(self) -> tuple[int, int]:
        """(running, waiting): vLLM counts the requests holding blocks while waiting as waiting."""
        return len(self.running), len(self.waiting) + len(self.kv_holding_waiting)

    def kv_usage(self) -> float:
        """Fraction of usable KV blocks in use."""
        return self.kv.usage

    def update_draft_token_ids(self, drafts: Mapping[str, list[int]]) -> None:
        """Drafts proposed after a step, cut to their grammar-valid prefix (structured output);
        ignored for prefill chunks (they sampled nothing)."""
        for rid, tokens in drafts.items():
            request = self.requests.get(rid)
            if request is None or request.is_finished:
                continue
            if request.is_prefill_chunk:
                if request.spec_token_ids:
                    request.spec_token_ids = []
                continue
            request.spec_token_ids = self.structured_output_manager.validate_tokens(request, list(tokens))

    def update_draft_token_ids_in_output(
        self, drafts: Mapping[str, list[int]], plan: StepPlan
    ) -> dict[str, int]:
        """A deferred batch gets the real drafts in place of its placeholders before its bitmask:
        cut to the scheduled count, grammar-invalid ones (and what follows) become -1 again.
        Returns vLLM's num_invalid_spec_tokens (request id -> drafts turned back into -1)."""
        num_invalid_spec_tokens: dict[str, int] = {}
        sched_spec_tokens = plan.spec_decode_tokens
        for rid, tokens in drafts.items():
            request = self.requests.get(rid)
            if request is None or request.is_finished:
                continue
            placeholders = sched_spec_tokens.get(rid)
            if not placeholders:
                continue
            num_scheduled = len(placeholders)
            valid = self.structured_output_manager.validate_tokens(request, list(tokens[:num_scheduled]))
            num_invalid = num_scheduled - len(valid)
            if num_invalid:
                valid = valid + [-1] * num_invalid
                num_invalid_spec_tokens[rid] = num_invalid
            sched_spec_tokens[rid] = valid
        return num_invalid_spec_tokens

    def get_grammar_bitmask(self, plan: StepPlan) -> GrammarOutput | None:
        """The bitmask rows of a step's sampling: its structured requests that sample, in
        scheduling order; a request finished since the plan was made (by the update a deferred
        batch waits for) has none."""
        if not plan.has_structured_output_requests:
            return None
        requests = self.requests
        ids: list[str] = []
        for rid in plan.num_scheduled_tokens:
            request = requests.get(rid)
            if request is not None and request.structured_output and not request.is_prefill_chunk:
                ids.append(rid)
        if not ids:
            return None
        return GrammarOutput(ids, self.structured_output_manager.grammar_bitmask(ids))

    def _request_blocks_can_be_freed(self, request: Request) -> bool:
        """Under deferred free, a victim still being written by an in-flight step cannot help now."""
        return not self.config.defer_block_free or self.kv.can_free_now(request.last_sched_seq)

    def _free_request_blocks(self, request: Request) -> None:
        """Free now, or park behind the fence of the newest scheduled step."""
        if self.config.defer_block_free:
            self.kv.free(request, request.last_sched_seq)
        else:
            self.kv.free(request)

    def _free_request(self, request: Request, delay_free_blocks: bool = False) -> None:
        """A finished request: report it in the next plan, release blocks (unless a KV transfer
        still needs them: the connector's delay_free_blocks), forget it."""
        self.finished_req_ids.append(request.request_id)
        connector = self.connector
        if connector is not None:
            self._inflight_prefills.discard(request)
            self.drop_stale_output_req_ids.discard(request.request_id)
            held = request.num_computed_tokens if self.kv.get_block_ids(request.request_id) else 0
            delay_free_blocks = connector.request_finished(request, held) or delay_free_blocks
        if not delay_free_blocks:
            self._free_blocks(request)

    def _free_blocks(self, request: Request) -> None:
        """Release the finished request's blocks and forget it."""
        rid = request.request_id
        self._free_request_blocks(request)
        self.kv.drop_request(request)
        self.recompute_frontier.pop(rid, None)
        del self.requests[rid]

    # ---------------------------------------------------------------- simulator capability
    def fast_forward(self) -> VllmFastForward:
        """Exact fast-forward of steady decode stretches (SupportsFastForward; schedsim's, not vLLM's)."""
        return VllmFastForward(self)

    def check_invariants(self) -> None:
        """KV blocks conserved, queues consistent, placeholders and in-flight counts >= 0; a
        tracked finished request holds blocks for a transfer, a blocked remote load holds its."""
        self.kv.check_invariants()
        running = set(map(id, self.running))
        waiting = set(map(id, self.waiting))
        holding = set(map(id, self.kv_holding_waiting))
        held = {id(r) for r in self.requests.values() if r.is_finished}
        assert len(running) == len(self.running), "duplicate in running"
        assert not running & waiting and not running & holding, "request both running and waiting"
        assert not waiting & holding, "request in both waiting queues"
        assert len(running) + len(waiting) + len(holding) + len(held) == len(self.requests), (
            "queues do not cover the requests"
        )
        assert self.connector is not None or not holding and not held, "transfer state without a connector"
        for rid in self.finished_recving_kv_req_ids:
            assert self.requests[rid].status == RequestStatus.WAITING_FOR_REMOTE_KVS, f"{rid}: not loading"
        assert self.failed_recving_kv_req_ids <= self.finished_recving_kv_req_ids, "failed load not ended"
        for request in self.requests.values():
            if request.is_finished or request.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                assert self.kv.get_block_ids(request.request_id), f"{request.request_id}: held without blocks"
                continue
            if id(request) in holding:
                # loaded (a one-token prompt loaded in full recomputes from 0, its block kept),
                # or a failed load given back
                assert request.status != RequestStatus.RUNNING, f"{request.request_id}: RUNNING but waiting"
                continue
            assert request.num_output_placeholders >= 0, f"{request.request_id}: placeholders < 0"
            assert request.num_in_flight_tokens >= 0, f"{request.request_id}: in-flight < 0"
            assert request.num_stale_output_tokens >= 0, f"{request.request_id}: stale < 0"
            assert request.safe_frontier >= 0, f"{request.request_id}: safe frontier < 0"
            if request.status == RequestStatus.RUNNING:
                assert id(request) in running, f"{request.request_id}: RUNNING but not in running"
            else:
                assert request.num_computed_tokens == 0, f"{request.request_id}: waiting with KV"
                assert not self.kv.get_block_ids(request.request_id), f"{request.request_id}: blocks"
