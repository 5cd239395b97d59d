"""`sglang-overlap`: SGLang 0.5.23's scheduler with its overlap event loop (`event_loop_overlap`).

One `schedule()` is SGLang's `get_next_batch_to_run`: stash the chunked request (insert the
chunks computed so far into the radix tree, the one still in flight included), merge the last
prefill (extend) batch into the running batch *before* that batch's result is processed, try a
new prefill batch through the PrefillAdder (prefill first; decodes wait unless mixed chunking is
on), otherwise update the running decode batch (skip requests whose in-flight output finishes
them by length, evict tree leaves for the next pages, retract on OOM). `update_from_output` is
`process_batch_result`: a prefill result inserts the request's computed tokens into the tree; a
finish inserts prompt and outputs, then frees the row. The engine's batch queue of depth 2
reproduces the overlap loop's order: launch batch k, process batch k-1's result, schedule k+1
(see docs/policies-sglang.md).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..baselines.base import BasePolicy
from ..kv_cache import KVCacheManager
from ..plan import RequestOutput, StepPlan, StepResult
from ..request import Request, RequestStatus
from .adder import AddReqResult, PrefillAdder
from .config import SGLangConfig
from .decode import finishing_inflight, retract_decode
from .fastforward import SGLangFastForward
from .mem_cache import MemCache
from .plan import SGLangStepPlan
from .schedule_policy import SchedulePolicy
from .slots import NewTokenRatioTracker, ReqToTokenPool


class SGLangOverlapPolicy(BasePolicy):
    """SGLang's Scheduler on the shared step interface."""

    clip_max_new_to_pool = True
    scheduling_policies: tuple[str, ...] = ("fcfs", "priority")

    def __init__(self, config: SGLangConfig) -> None:
        super().__init__(config)
        self.config: SGLangConfig = config
        # SGLang's page pool and request rows: blocks without vLLM's hash cache (the tree caches)
        self.kv = KVCacheManager(
            config.num_gpu_blocks, config.block_size, config.max_model_len, enable_caching=False
        )
        self.mem = MemCache(self.kv, config.page_size, config.enable_prefix_caching)
        self.tree_cache = self.mem.tree_cache
        self.policy = SchedulePolicy(config.schedule_policy, self.mem, config.scheduling_policy == "priority")
        self.max_concurrent_batches = 1 if config.disable_overlap_schedule else 2
        self.pool = ReqToTokenPool(config.max_num_seqs)
        self.ratio = NewTokenRatioTracker.from_config(
            config.init_new_token_ratio,
            config.schedule_conservativeness,
            config.min_new_token_ratio_factor,
            config.new_token_ratio_decay_steps,
        )
        pool_tokens = self.kv.pool.num_usable_blocks * config.block_size
        self.max_req_len = min(config.max_model_len - 1, pool_tokens - 1)
        self.max_req_input_len = self.max_req_len - 5
        self.max_new: dict[str, int] = {}
        self.chunked_req: Request | None = None
        self.last_extend_reqs: list[Request] = []
        self.batch_is_full = False
        self.intake_aborts: list[RequestOutput] = []

    def fast_forward(self) -> SGLangFastForward:
        """Exact fast-forward of steady decode stretches (SupportsFastForward)."""
        return SGLangFastForward(self)

    # ---- intake ----
    def add_request(self, request: Request) -> None:
        """Queue with max_new_tokens clipped as `init_req_max_new_tokens` does (to the context and
        to an empty pool); a prompt of `max_req_input_len` tokens or more is aborted (SGLang's
        `validate_input_length`), reported by the next update."""
        cfg = self.config
        if request.prompt_len >= self.max_req_input_len:
            self._queue(request)  # SGLang aborts it before any check of its own can refuse it
            self.waiting.pop()
            self._finish(request, RequestStatus.FINISHED_ABORTED)
            self.intake_aborts.append(RequestOutput(request.request_id, [], RequestStatus.FINISHED_ABORTED))
            return
        super().add_request(request)
        capacity = self.kv.pool.num_usable_blocks * cfg.block_size
        page = self.mem.page_size  # (the config's is a property: a Python call, compiled)
        paged = -(-request.prompt_len // page) * page
        # 0 is possible (a prompt filling the empty pool): the prefill's token still finishes it
        self.max_new[request.request_id] = max(
            0,
            min(
                request.max_tokens,
                self.max_req_len - request.prompt_len - 1,
                capacity - paged - page - 1,
            ),
        )

    def has_requests(self) -> bool:
        """Unfinished requests, or finishes (intake aborts included) not yet reported."""
        return super().has_requests() or bool(self.intake_aborts)

    def max_new_tokens(self, req: Request) -> int:
        """SGLang's clipped max_new_tokens."""
        cap = self.max_new.get(req.request_id)
        return req.max_tokens if cap is None else cap

    def stop_ids_apply(self, req: Request) -> bool:
        """`_check_token_based_finish` returns at once under ignore_eos: stop token ids included."""
        return not req.ignore_eos

    def kv_usage(self) -> float:
        """SGLang's token usage: KV neither free nor evictable from the tree."""
        return self.mem.token_usage()

    def new_plan(self) -> StepPlan:
        """Plans carry slots and future-token slots."""
        return SGLangStepPlan()

    # ---- get_next_batch_to_run ----
    def schedule_into(self, plan: StepPlan) -> None:
        """Stash the chunked request, merge the last extend batch, then a prefill batch if one
        forms, else the decode batch."""
        assert isinstance(plan, SGLangStepPlan)
        self._stash_chunked_request()
        self._merge_last_batch()
        if not self.get_new_batch_prefill(plan):
            self._update_running_batch(plan)
        if plan.chunked_req_id is None and self.chunked_req is not None:
            plan.chunked_req_id = self.chunked_req.request_id
        if not plan.num_scheduled_tokens and not self.requests:
            self.ratio.reset()

    def _stash_chunked_request(self) -> None:
        """The chunked request's computed chunks (the one in flight too) join the tree."""
        req = self.chunked_req
        if req is None:
            return
        st = self.mem.info(req)
        if req.num_computed_tokens > st.prefix_len:
            self.mem.checkpoint_kv_cache(req, req.num_computed_tokens)
            st.prefix_len = req.num_computed_tokens

    def _merge_last_batch(self) -> None:
        """The last prefill batch joins the running batch (minus the chunked and finished requests)."""
        reqs, self.last_extend_reqs = self.last_extend_reqs, []
        if not reqs:
            return
        if not self.running:
            self.batch_is_full = False  # the extend batch object becomes the running batch
        present = set(self.running)  # mixed batches' decodes are already running (by identity)
        for req in reqs:
            if req is self.chunked_req or req.status != RequestStatus.RUNNING:
                self.batch_is_full = False
                continue
            if req not in present:
                self.running.append(req)

    def num_allocatable(self, running_bs: int, held_rows: int) -> int:
        """Requests that may still join: max_running_requests and free request-pool rows."""
        return min(self.config.max_num_seqs - running_bs, self.pool.available_size() + held_rows)

    def get_new_batch_prefill(self, plan: SGLangStepPlan) -> bool:
        """Build a prefill batch with the PrefillAdder; False if none forms."""
        if not self.running:
            self.batch_is_full = False
        if (self.batch_is_full or not self.waiting) and self.chunked_req is None:
            return False
        running_bs = len(self.running)
        if self.num_allocatable(running_bs, 0) <= 0 and self.chunked_req is None:
            self.batch_is_full = True
            return False
        order = self.policy.calc_priority(self.waiting)
        if order is not None:
            self.waiting = type(self.waiting)(order)
        mixed = running_bs if self.config.enable_mixed_chunk else 0
        adder = PrefillAdder(self.config, self.mem, self.running, self.ratio.current, mixed, self.max_new)
        still_chunked = False
        chunked = self.chunked_req
        if chunked is not None:
            still_chunked = adder.add_chunked_req(chunked, self.mem.info(chunked).prefix_len)
        self._add_waiting(adder, running_bs)
        if not adder.can_run:
            return False
        self._launch_extend(plan, adder, still_chunked)
        if self.config.enable_mixed_chunk and self.running:
            self._mix_with_running(plan)
        return True

    def _add_waiting(self, adder: PrefillAdder, running_bs: int) -> None:
        """Offer waiting requests in queue order until a budget says stop."""
        mem = self.mem
        # rows the batch already holds: the chunked request's (a waiting request holds none)
        held = sum(1 for a in adder.can_run if a.request.request_id in self.pool.slot_of)
        for req in self.waiting:  # (nothing here changes the queue: a deque would raise)
            if adder.budget_state() == AddReqResult.OTHER:
                break
            if req.num_stale_output_tokens > 0:
                continue  # a retracted request whose dropped output is still in flight
            if len(adder.can_run) >= self.num_allocatable(running_bs, held):
                self.batch_is_full = True
            if self.batch_is_full:
                break
            prefix_len = mem.match_kv_cache(req, max(req.num_tokens - 1, 0))  # init_next_round_input
            res = adder.add_one_req(req, prefix_len)
            if res != AddReqResult.CONTINUE:
                if res == AddReqResult.NO_TOKEN:
                    self.batch_is_full = bool(adder.can_run) or bool(self.running)
                break

    def _launch_extend(self, plan: SGLangStepPlan, adder: PrefillAdder, still_chunked: bool) -> None:
        """Turn the adder's list into the extend batch: rows, KV (`prepare_for_extend`), plan."""
        self._drop_admitted(adder)
        slots = self.pool.alloc([a.request.request_id for a in adder.can_run])
        self.mem.alloc_for_extend([a.request for a in adder.can_run], [a.extend_len for a in adder.can_run])
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

    def _drop_admitted(self, adder: PrefillAdder) -> None:
        """Take the admitted requests out of the queue, keeping the others' order: the adder took
        them from the front, so they leave from there unless it skipped some on the way."""
        admitted = {a.request for a in adder.can_run if a.request is not self.chunked_req}
        waiting = self.waiting
        left = len(admitted)
        while left and waiting and waiting[0] in admitted:
            waiting.popleft()
            left -= 1
        if left:  # a skipped request stands between admitted ones
            self.waiting = type(waiting)(r for r in waiting if r not in admitted)

    def _mix_with_running(self, plan: SGLangStepPlan) -> None:
        """Mixed chunk: the running decodes ride along if their next pages fit (never retracted)."""
        self._drop_finishing()
        if self.running and self.mem.check_decode_mem(self.running):
            self._prepare_for_decode(plan)
            plan.forward_mode = "mixed"
            plan.decoding_req_ids = [r.request_id for r in self.running]

    # ---- update_running_batch ----
    def _drop_finishing(self) -> bool:
        """Remove requests whose in-flight output finishes them by length; True if any."""
        if self.max_concurrent_batches < 2 or not self.config.enable_skip_finishing_decode:
            return False
        finishing = finishing_inflight(self.running, self.max_new)
        if finishing:
            gone = set(finishing)  # (requests hash by identity)
            self.running = [r for r in self.running if r not in gone]
            self.batch_is_full = False
        return bool(finishing)

    def _update_running_batch(self, plan: SGLangStepPlan) -> None:
        """Decode the running batch: skip finishing requests, evict for the next pages, retract on
        OOM, else decay the ratio."""
        if not self.running:
            return
        had_finishing = self._drop_finishing()
        if not self.running:
            return
        if not self.mem.check_decode_mem(self.running):
            if had_finishing:
                return  # their queued result frees KV; decode the rest next step
            self._retract(plan)
        else:
            self.ratio.decay_step()
        if self.running:
            self._prepare_for_decode(plan)
            plan.forward_mode = "decode"

    def _retract(self, plan: SGLangStepPlan) -> None:
        """retract_decode: requeue victims at the back, abort the last one if even it cannot fit;
        the survivors run in retraction order from now on."""
        kept, retracted, aborted = retract_decode(self.running, self.mem.check_decode_mem, self._release_req)
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

    def _release_req(self, req: Request, remaining: int) -> None:
        """A retraction victim frees everything the tree does not hold, then `remaining x 20`
        tokens are made free for the survivors."""
        self.preempt(req)
        self.mem.evict_from_tree_cache(remaining * self.config.retract_decode_steps)

    def _prepare_for_decode(self, plan: SGLangStepPlan) -> None:
        """One token per running request (its next page evicted for, if it needs one); an
        unresolved input token comes from the future map."""
        self.mem.alloc_for_decode(self.running)
        slot_of = self.pool.slot_of
        for req in self.running:
            self.add_to_plan(plan, req, 1)
            rid = req.request_id
            slot = slot_of[rid]
            plan.req_pool_indices[rid] = slot
            if req.num_output_placeholders > 0:
                plan.future_token_slots[rid] = slot

    # ---- process_batch_result ----
    def update_from_output(self, plan: StepPlan, result: StepResult) -> list[RequestOutput]:
        """Fold a batch's sampled tokens in (`process_batch_result`): a completed prefill
        inserts its request's computed tokens into the tree; stale or finished ones are dropped."""
        assert isinstance(plan, SGLangStepPlan)
        outputs: list[RequestOutput] = self.intake_aborts
        self.intake_aborts = []
        sampled = result.sampled_token_ids
        prefill = plan.forward_mode in ("extend", "mixed")
        decoding = set(plan.decoding_req_ids)
        for rid, n in plan.num_scheduled_tokens.items():
            req = self.requests.get(rid)
            if req is None:
                continue
            req.num_in_flight_tokens -= n
            if req.num_stale_output_tokens > 0:
                req.num_stale_output_tokens -= n
                continue
            tokens = sampled.get(rid) or []
            if not tokens:
                continue  # a middle chunk
            if req.num_output_placeholders:
                req.num_output_placeholders -= 1
            out = self._append_tokens(req, tokens)
            if out is not None:
                outputs.append(out)
                if out.finish_reason is None and prefill and rid not in decoding:
                    self.mem.checkpoint_kv_cache(req, plan.context_lens[rid] + n)
                    self.mem.info(req).prefix_len = plan.context_lens[rid] + n
        for rid in sorted(result.failed_kv_load_ids):
            req = self.requests.get(rid)
            if req is not None:
                self.stop_request(req, RequestStatus.FINISHED_ERROR)
                outputs.append(RequestOutput(rid, [], RequestStatus.FINISHED_ERROR))
        return outputs

    def stop_request(self, req: Request, status: RequestStatus) -> None:
        """A finish inserts prompt and outputs into the tree before the row is freed (SGLang's
        `release_kv_cache(checkpoint=True)`); a failed KV load inserts nothing."""
        if status != RequestStatus.FINISHED_ERROR:
            self.mem.release_kv_cache(req, checkpoint=True)
        super().stop_request(req, status)

    # ---- leaving ----
    def _on_leave(self, req: Request) -> None:
        """Free KV, the tree lock and the request-pool row; a batch member leaving un-fills the
        running batch."""
        if req.request_id in self.pool.slot_of:
            self.batch_is_full = False
        self.mem.release_kv_cache(req, checkpoint=False)
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
            gone = set(aborted)
            self.last_extend_reqs = [r for r in self.last_extend_reqs if r not in gone]
        return aborted

    def check_invariants(self) -> None:
        """KV references (rows and tree), tree locks, request states and request-pool rows."""
        self.mem.check_invariants()
        self.check_requests()
        self.pool.check_invariants()
        for rid in self.pool.slot_of:
            assert rid in self.requests, f"{rid}: finished request holds a pool row"
        for req in self.running:
            assert req.request_id in self.pool.slot_of, f"{req.request_id}: running without a row"
        for req in self.waiting:
            assert req.request_id not in self.pool.slot_of, f"{req.request_id}: waiting with a row"
        assert len(self.running) <= self.config.max_num_seqs, "running batch over max_running_requests"
