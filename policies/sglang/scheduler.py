"""`sglang-overlap`: SGLang 0.5.x's scheduler with its overlap event loop (`event_loop_overlap`).

One `schedule()` is SGLang's `get_next_batch_to_run`: merge the last prefill (extend) batch into
the running batch, *before* that batch's result is processed; try a new prefill batch through
the PrefillAdder (prefill first; decodes wait unless mixed chunking is on); otherwise update the
running decode batch (skip requests whose in-flight output finishes them by length, retract on
KV OOM). The engine's batch queue of depth 2 then reproduces the overlap loop's order: launch
batch k, process batch k-1's result, schedule k+1 (see docs/policies-sglang.md).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..baselines.base import BasePolicy
from ..plan import StepPlan
from ..registry import register_policy
from ..request import Request, RequestStatus
from .adder import AddReqResult, PrefillAdder
from .config import SGLangConfig
from .decode import finishing_inflight, pages_needed, retract_decode
from .fastforward import SGLangFastForward
from .lpm import sort_longest_prefix_first
from .plan import SGLangStepPlan
from .slots import NewTokenRatioTracker, ReqToTokenPool


@register_policy(
    "sglang-overlap",
    "SGLang 0.5.x overlap scheduler: prefill-first PrefillAdder, retract on OOM, one-step-late finishes",
    SGLangConfig,
)
class SGLangOverlapPolicy(BasePolicy):
    """SGLang's Scheduler on the shared step interface."""

    clip_max_new_to_pool = True
    scheduling_policies = ("fcfs", "priority")

    def __init__(self, config: SGLangConfig) -> None:
        super().__init__(config)
        self.config: SGLangConfig = config
        self.max_concurrent_batches = 1 if config.disable_overlap_schedule else 2
        self.pool = ReqToTokenPool(config.max_num_seqs)
        self.ratio = NewTokenRatioTracker.from_config(
            config.init_new_token_ratio,
            config.schedule_conservativeness,
            config.min_new_token_ratio_factor,
            config.new_token_ratio_decay_steps,
        )
        self.max_new: dict[str, int] = {}
        self.chunked_req: Request | None = None
        self.last_extend_reqs: list[Request] = []
        self.batch_is_full = False

    def fast_forward(self) -> SGLangFastForward:
        """Exact fast-forward of steady decode stretches (SupportsFastForward)."""
        return SGLangFastForward(self)

    # ---- intake ----
    def add_request(self, request: Request) -> None:
        """Queue, clipping max_new_tokens to the context and to an empty pool (init_req_max_new_tokens)."""
        super().add_request(request)
        cfg = self.config
        capacity = self.kv.pool.num_usable_blocks * cfg.block_size
        paged = -(-request.prompt_len // cfg.page_size) * cfg.page_size
        cap = min(
            request.max_tokens, cfg.max_model_len - request.prompt_len, capacity - paged - cfg.page_size - 1
        )
        if cap < 1:
            self.requests.pop(request.request_id)
            self.waiting.pop()
            raise ValueError(
                f"request {request.request_id}: prompt_len {request.prompt_len} exceeds the "
                f"KV memory budget ({capacity} tokens, num_gpu_blocks)"
            )
        self.max_new[request.request_id] = cap

    def max_new_tokens(self, req: Request) -> int:
        """SGLang's clipped max_new_tokens."""
        return self.max_new.get(req.request_id, req.max_tokens)

    def new_plan(self) -> StepPlan:
        """Plans carry slots and future-token slots."""
        return SGLangStepPlan()

    # ---- get_next_batch_to_run ----
    def schedule_into(self, plan: StepPlan) -> None:
        """Merge the last extend batch, then a prefill batch if one forms, else the decode batch."""
        assert isinstance(plan, SGLangStepPlan)
        self._merge_last_batch()
        if not self._get_new_batch_prefill(plan):
            self._update_running_batch(plan)
        if plan.chunked_req_id is None and self.chunked_req is not None:
            plan.chunked_req_id = self.chunked_req.request_id
        if not plan.num_scheduled_tokens and not self.requests:
            self.ratio.reset()

    def _merge_last_batch(self) -> None:
        """The last prefill batch joins the running batch (minus the chunked and finished requests)."""
        reqs, self.last_extend_reqs = self.last_extend_reqs, []
        if reqs and not self.running:
            self.batch_is_full = False  # the extend batch object becomes the running batch
        present = {id(r) for r in self.running}  # mixed batches' decodes are already running
        for req in reqs:
            if req is self.chunked_req or req.status != RequestStatus.RUNNING:
                self.batch_is_full = False
                continue
            if id(req) not in present:
                self.running.append(req)

    def _num_allocatable(self, running_bs: int, held_rows: int) -> int:
        """Requests that may still join: max_running_requests and free request-pool rows."""
        return min(self.config.max_num_seqs - running_bs, self.pool.available_size() + held_rows)

    def _get_new_batch_prefill(self, plan: SGLangStepPlan) -> bool:
        """Build a prefill batch with the PrefillAdder; False if none forms."""
        if not self.running:
            self.batch_is_full = False
        if (self.batch_is_full or not self.waiting) and self.chunked_req is None:
            return False
        running_bs = len(self.running)
        if self._num_allocatable(running_bs, 0) <= 0 and self.chunked_req is None:
            self.batch_is_full = True
            return False
        if self.config.scheduling_policy == "priority":
            self.waiting = type(self.waiting)(sorted(self.waiting, key=lambda r: r.priority))
        elif self.config.schedule_policy == "lpm":
            self.waiting = type(self.waiting)(
                sort_longest_prefix_first(list(self.waiting), self.kv, self.config.block_size)
            )
        mixed = running_bs if self.config.enable_mixed_chunk else 0
        adder = PrefillAdder(
            self.config,
            self.kv.num_free_blocks * self.config.block_size,
            self.running,
            self.ratio.current,
            mixed,
            self.max_new,
        )
        still_chunked = False
        chunked = self.chunked_req
        if chunked is not None:
            still_chunked = adder.add_chunked_req(chunked)
            if adder.can_run and not self.allocate(chunked, adder.can_run[-1].extend_len):
                adder.pop_last()
                still_chunked = True
        self._add_waiting(adder, running_bs)
        if not adder.can_run:
            return False
        self._launch_extend(plan, adder, still_chunked)
        if self.config.enable_mixed_chunk and self.running:
            self._mix_with_running(plan)
        return True

    def _add_waiting(self, adder: PrefillAdder, running_bs: int) -> None:
        """Offer waiting requests in queue order until a budget says stop."""
        for req in list(self.waiting):
            if adder.budget_state() == AddReqResult.OTHER:
                break
            if req.num_stale_output_tokens > 0:
                continue  # a retracted request whose dropped output is still in flight
            held = sum(1 for a in adder.can_run if a.request.request_id in self.pool.slot_of)
            if len(adder.can_run) >= self._num_allocatable(running_bs, held):
                self.batch_is_full = True
            if self.batch_is_full:
                break
            hit_blocks, hit = self.prefix_hit(req)
            res = adder.add_one_req(req, hit, hit_blocks)
            if adder.can_run and adder.can_run[-1].request is req:
                if not self.allocate(req, adder.can_run[-1].extend_len, hit_blocks, hit):
                    adder.pop_last()
                    res = AddReqResult.NO_TOKEN
            if res != AddReqResult.CONTINUE:
                if res == AddReqResult.NO_TOKEN:
                    self.batch_is_full = bool(adder.can_run) or bool(self.running)
                break

    def _launch_extend(self, plan: SGLangStepPlan, adder: PrefillAdder, still_chunked: bool) -> None:
        """Turn the adder's list into the extend batch: slots, statuses, plan entries."""
        admitted = {id(a.request) for a in adder.can_run}
        self.waiting = type(self.waiting)(r for r in self.waiting if id(r) not in admitted)
        slots = self.pool.alloc([a.request.request_id for a in adder.can_run])
        for adm, slot in zip(adder.can_run, slots, strict=True):
            req = adm.request
            if req.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED):
                ids = plan.resumed_req_ids if req.status == RequestStatus.PREEMPTED else plan.new_req_ids
                ids.append(req.request_id)
                req.status = RequestStatus.RUNNING
            self.add_to_plan(plan, req, adm.extend_len)
            plan.req_pool_indices[req.request_id] = slot
        if adder.new_chunked is not None:
            self.chunked_req = adder.new_chunked.request
        elif not still_chunked:
            self.chunked_req = None
        self.last_extend_reqs = [a.request for a in adder.can_run]
        plan.forward_mode = "extend"

    def _mix_with_running(self, plan: SGLangStepPlan) -> None:
        """Mixed chunk: the running decodes ride along if their next pages fit (never retracted)."""
        self._drop_finishing()
        if self.running and pages_needed(self.running, self.config.block_size) <= self.kv.num_free_blocks:
            self._add_decodes(plan)
            plan.forward_mode = "mixed"

    # ---- update_running_batch ----
    def _drop_finishing(self) -> bool:
        """Remove requests whose in-flight output finishes them by length; True if any."""
        if self.max_concurrent_batches < 2 or not self.config.enable_skip_finishing_decode:
            return False
        finishing = finishing_inflight(self.running, self.max_new)
        if finishing:
            gone = {id(r) for r in finishing}
            self.running = [r for r in self.running if id(r) not in gone]
            self.batch_is_full = False
        return bool(finishing)

    def _update_running_batch(self, plan: SGLangStepPlan) -> None:
        """Decode the running batch: skip finishing requests, retract on OOM, else decay the ratio."""
        if not self.running:
            return
        had_finishing = self._drop_finishing()
        if not self.running:
            return
        bs = self.config.block_size
        if pages_needed(self.running, bs) > self.kv.num_free_blocks:
            if had_finishing:
                return  # their queued result frees KV; decode the rest next step
            self._retract(plan)
        else:
            self.ratio.decay_step()
        if self.running:
            self._add_decodes(plan)
            plan.forward_mode = "decode"

    def _retract(self, plan: SGLangStepPlan) -> None:
        """retract_decode: requeue victims at the back, abort the last one if even it cannot fit."""
        kept, retracted, aborted = retract_decode(
            self.running, lambda: self.kv.num_free_blocks, self.config.block_size, self.preempt
        )
        self.running = kept
        self.batch_is_full = False
        if aborted is not None:
            self._on_leave(aborted)
            self._finish(aborted, RequestStatus.FINISHED_ABORTED)
        self.ratio.current = NewTokenRatioTracker.after_retract(
            [(r.num_output_tokens, self.max_new[r.request_id]) for r in kept],
            self.config.retract_decode_steps,
        )
        self.waiting.extend(retracted)

    def _add_decodes(self, plan: SGLangStepPlan) -> None:
        """One token per running request; an unresolved input token comes from the future map."""
        for req in self.running:
            if not self.allocate(req, 1):
                raise AssertionError(f"sglang: decode of {req.request_id} did not fit after the check")
            self.add_to_plan(plan, req, 1)
            slot = self.pool.slot_of[req.request_id]
            plan.req_pool_indices[req.request_id] = slot
            if req.num_output_placeholders > 0:
                plan.future_token_slots[req.request_id] = slot

    # ---- leaving ----
    def _on_leave(self, req: Request) -> None:
        """Free KV and the request-pool row; a batch member leaving un-fills the running batch."""
        if req.request_id in self.pool.slot_of:
            self.batch_is_full = False
        super()._on_leave(req)
        self.pool.free(req.request_id)
        if req is self.chunked_req:
            self.chunked_req = None

    def _finish(self, req: Request, status: RequestStatus) -> None:
        """Forget the clipped cap too."""
        super()._finish(req, status)
        self.max_new.pop(req.request_id, None)

    def abort_requests(self, request_ids: Iterable[str]) -> list[Request]:
        """Aborts also leave the not-yet-merged extend batch."""
        aborted = super().abort_requests(request_ids)
        if aborted:
            gone = {id(r) for r in aborted}
            self.last_extend_reqs = [r for r in self.last_extend_reqs if id(r) not in gone]
        return aborted

    def check_invariants(self) -> None:
        """Base checks, plus: every row holder is live and every running request holds a row."""
        super().check_invariants()
        self.pool.check_invariants()
        for rid in self.pool.slot_of:
            assert rid in self.requests, f"{rid}: finished request holds a pool row"
        for req in self.running:
            assert req.request_id in self.pool.slot_of, f"{req.request_id}: running without a row"
        for req in self.waiting:
            assert req.request_id not in self.pool.slot_of, f"{req.request_id}: waiting with a row"
        assert len(self.running) <= self.config.max_num_seqs, "running batch over max_running_requests"
