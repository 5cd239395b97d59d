"""`vllm`: vLLM 0.33.0's V1 Scheduler.schedule() (unified budget, running first, recompute preemption)."""

from __future__ import annotations

from ..kv_cache import KVCacheManager
from ..plan import StepPlan
from ..request import Request, RequestStatus
from .config import VllmConfig
from .fastforward import FastForwardMixin
from .lifecycle import LifecycleMixin
from .output import OutputMixin
from .queues import FCFSQueue, PriorityQueue


class _StepState:
    """Budgets and per-step lists of one schedule() call."""

    __slots__ = ("token_budget", "input_budget", "num_scheduled", "spec", "scheduled_running",
                 "preempted", "new", "resumed", "prefill_scheduled", "threshold", "context")

    def __init__(self, budget: int, threshold: int) -> None:
        self.token_budget = budget
        self.input_budget = budget
        self.num_scheduled: dict[str, int] = {}
        self.spec: dict[str, list[int]] = {}
        self.context: dict[str, int] = {}
        self.scheduled_running: list[Request] = []
        self.preempted: list[Request] = []
        self.new: list[Request] = []
        self.resumed: list[Request] = []
        self.prefill_scheduled = False
        self.threshold = threshold


class VllmScheduler(FastForwardMixin, LifecycleMixin, OutputMixin):  # compiled: concrete base first
    """Synchronous V1 scheduler: schedule step s, then update from step s."""

    max_concurrent_batches = 1
    is_async = False

    def __init__(self, config: VllmConfig) -> None:
        self.config = config
        # lazy_private: a vLLM request looks up blocks only while it holds none (see KVCacheManager)
        self.kv = KVCacheManager(config.num_gpu_blocks, config.block_size, config.max_model_len,
                                 config.enable_prefix_caching, config.watermark, lazy_private=True)
        self.requests: dict[str, Request] = {}
        self.running: list[Request] = []
        self.waiting = PriorityQueue() if config.scheduling_policy == "priority" else FCFSQueue()
        self.priority = config.scheduling_policy == "priority"
        self.max_num_active = config.max_num_active_seqs or config.max_num_seqs
        self.num_spec_tokens = config.num_spec_tokens
        self.finished_req_ids: list[str] = []
        self.preempted_req_ids: list[str] = []
        self.recompute_frontier: dict[str, int] = {}
        self.current_step = 0

    # ---------------------------------------------------------------- schedule
    def schedule(self) -> StepPlan:
        """Plan one step: running requests first, then admissions if nothing was preempted."""
        self.current_step += 1
        cfg = self.config
        num_eligible = len(self.running) + len(self.waiting)
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
        num_scheduled, context, spec_out = st.num_scheduled, st.context, st.spec
        threshold = st.threshold
        token_budget, input_budget = st.token_budget, st.input_budget
        # KV fast path (no append_slots when no block is needed and nothing new gets cached: most
        # decode steps); every other case goes through append_slots.
        req_index = 0
        while req_index < len(running) and token_budget > 0:
            request = running[req_index]
            if input_budget <= 0:
                break
            placeholders = request.num_output_placeholders
            computed = request.num_computed_tokens
            if placeholders > 0 and (computed + 2 - placeholders
                                     >= request.prompt_len + request.max_tokens):
                req_index += 1  # async: the in-flight step already reaches max_tokens
                continue
            num_tokens = request.prompt_len + len(request.output_token_ids)
            num_new = num_tokens + len(request.spec_token_ids) + placeholders - computed
            if 0 < threshold < num_new:
                num_new = threshold
            if num_new > token_budget:
                num_new = token_budget
            if num_new > input_budget:
                num_new = input_budget
            if num_new > max_model_len - computed - 1:
                num_new = max_model_len - computed - 1
            if num_new <= 0:
                req_index += 1  # fully scheduled but not yet processed: let others run
                continue
            rid = request.request_id
            if kv.holds_new_tokens(rid, computed + num_new, num_tokens):
                pass  # the request's blocks already hold the new tokens
            elif not kv.append_slots(request, num_new):
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
            context[rid] = computed
            token_budget -= num_new
            input_budget -= num_new
            if self.recompute_frontier:
                self._count_recompute(request, num_new, computed)
            req_index += 1
            if request.spec_token_ids:
                n_spec = num_new + computed - num_tokens - placeholders
                if n_spec > 0:
                    spec_out[rid] = request.spec_token_ids[:n_spec]
                request.spec_token_ids = []
        st.token_budget, st.input_budget = token_budget, input_budget

    def _allocate_or_preempt(self, st: _StepState, request: Request, num_new: int,
                             req_index: int) -> tuple[bool, int]:
        """After a failed allocate_slots: preempt victims (last running / lowest priority) until it fits."""
        running = self.running
        if self.kv.allocate_slots(request, num_new) is not None:
            return True, req_index
        while True:
            if self.priority:
                victim = max(running, key=lambda r: (r.priority, r.arrival_time))
            else:
                victim = running[-1]
            if not self._blocks_can_be_freed(victim):
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
                    st.input_budget += n
                    st.spec.pop(victim.request_id, None)
                    st.context.pop(victim.request_id, None)
            else:
                running.pop()
            self._preempt(victim)
            st.preempted.append(victim)
            if victim is request:
                return False, req_index
            if self.kv.allocate_slots(request, num_new) is not None:
                return True, req_index

    def _schedule_waiting(self, st: _StepState) -> None:
        """Admit waiting requests in queue order until budget, seats or KV run out (no preemption)."""
        cfg = self.config
        waiting = self.waiting
        skipped: list[Request] = []
        k = self.num_spec_tokens
        while st.token_budget > 0:
            if not waiting or st.input_budget <= 0 or len(self.running) >= self.max_num_active:
                break
            request = waiting.peek()
            if request.num_stale_output_tokens:
                skipped.append(waiting.pop())  # its in-flight output has not come back yet
                continue
            hit, num_computed = self.kv.get_computed_blocks(request)
            budget = min(st.token_budget, st.input_budget)
            num_new = request.num_tokens - num_computed
            pad = False
            if (k > 0 and num_new == 1 and not st.prefill_scheduled
                    and (st.scheduled_running or num_computed > 0)
                    and num_computed + 1 + k + 1 <= cfg.max_model_len):
                if 1 + k > budget:
                    break
                num_new, pad = 1 + k, True
            if 0 < st.threshold < num_new:
                num_new = st.threshold
            if not cfg.enable_chunked_prefill and num_new > budget:
                break
            num_new = min(num_new, budget)
            if self.kv.allocate_slots(request, num_new, num_computed, hit,
                                      full_sequence_must_fit=cfg.scheduler_reserve_full_isl,
                                      has_scheduled_reqs=bool(self.running)) is None:
                break
            waiting.pop()
            self.running.append(request)
            (st.new if request.status == RequestStatus.WAITING else st.resumed).append(request)
            request.status = RequestStatus.RUNNING
            request.num_computed_tokens = num_computed
            self._record(st, request, num_new, num_computed)
            if pad:
                st.spec[request.request_id] = [-1] * k
        if skipped:
            waiting.prepend_many(skipped)

    def _record(self, st: _StepState, request: Request, num_new: int, context: int) -> None:
        """Charge the budgets for an admitted request."""
        rid = request.request_id
        st.num_scheduled[rid] = num_new
        st.context[rid] = context
        st.token_budget -= num_new
        st.input_budget -= num_new
        if self.recompute_frontier:
            self._count_recompute(request, num_new, context)

    def _count_recompute(self, request: Request, num_new: int, context: int) -> None:
        """Tokens scheduled below the pre-preemption frontier are computed a second time."""
        rid = request.request_id
        frontier = self.recompute_frontier.get(rid)
        if frontier is not None:
            request.num_recomputed_tokens += max(0, min(context + num_new, frontier) - context)
            if context + num_new >= frontier:
                del self.recompute_frontier[rid]

    def _make_plan(self, st: _StepState) -> StepPlan:
        """Fill the StepPlan, advance the fence and the optimistic counters."""
        total = sum(st.num_scheduled.values())
        assert total <= self.config.max_num_batched_tokens
        tables = self.kv.req_to_blocks
        plan = StepPlan(
            step_id=self.current_step - 1,
            num_scheduled_tokens=st.num_scheduled,
            total_num_scheduled_tokens=total,
            context_lens=st.context,
            spec_decode_tokens=st.spec,
            block_ids={rid: tables[rid] for rid in st.num_scheduled},
            new_req_ids=[r.request_id for r in st.new],
            resumed_req_ids=[r.request_id for r in st.resumed],
            preempted_req_ids=self.preempted_req_ids,
            finished_req_ids=self.finished_req_ids,
        )
        if self.config.defer_block_free and total > 0:
            self.kv.begin_step()
        self._update_after_schedule(plan)
        return plan

    def _update_after_schedule(self, plan: StepPlan) -> None:
        """Computed tokens advance at schedule time (optimistically); outputs settle later."""
        requests = self.requests
        seq = self.kv.sched_step_seq if self.config.defer_block_free else None
        has_so = False
        for rid, n in plan.num_scheduled_tokens.items():
            request = requests[rid]
            request.num_computed_tokens += n
            request.num_in_flight_tokens += n
            if seq is not None:
                request.last_sched_seq = seq
            request.is_prefill_chunk = request.num_computed_tokens < (
                request.num_tokens + request.num_output_placeholders)
            has_so |= request.structured_output and not request.is_prefill_chunk
        plan.has_structured_output_requests = has_so
        self.finished_req_ids = []
        self.preempted_req_ids = []
