"""Exact fast-forward of the vLLM schedulers: steady decode stretches in closed form.

The companion `Scheduler.fast_forward()` hands to the simulator (`schedsim.fastforward`); it reads
the scheduler's state and moves it through the scheduler's own calls, so `scheduler.py` reads
like vLLM's. In a stretch, `schedule()` gives every running request one token and
`update_from_output` stops none but (possibly) in the last iteration. The KV work is replayed
(`schedsim.policies.fastforward`) through `KVCacheManager.append_slots` at exactly the
iterations where the fast path of `_schedule_running` (`KVCacheManager.holds_new_tokens`) would
not apply; the last update's stops go through `finish_requests` with the status vLLM's
`check_stop` gives.

Requests may wait through a stretch when no schedule of it can admit one (`_admits_none`: every
seat taken, or the queue's head short of blocks whatever the stretch frees and however its
prefix hits change); under FCFS, arrivals then wait too (`arrivals_wait`). A preempted request
may be among them with its recompute frontier: no schedule of the stretch counts against it.

Supported: `vllm` with one batch in flight and `vllm-async` with two (the engines' defaults).
No stretch starts while a KV transfer of a prefill/decode pair is pending, running or holding
blocks (`has_kv_transfers_in_flight`): its end changes the schedule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..fastforward import FastForwardBase, HeadDemand
from ..plan import RequestOutput, StepPlan
from ..request import Request, RequestStatus
from .utils import stop_status

if TYPE_CHECKING:  # the scheduler builds this companion (no import cycle at run time)
    from .scheduler import Scheduler


class VllmFastForward(FastForwardBase):
    """The vLLM schedulers' steady state, KV call, counters and last-update stops."""

    finishes_in_last_update = True

    def __init__(self, scheduler: Scheduler) -> None:
        super().__init__(scheduler)
        self.sched = scheduler

    def steady_running(self, depth: int) -> list[Request] | None:
        """The running requests if the next iterations are plain decodes of each, else None."""
        s = self.sched
        self.waiters_stay = False
        if depth != s.max_concurrent_batches or not s.running or len(s.kv_holding_waiting):
            return None
        if s.connector is not None and (
            len(s.kv_holding_waiting) or s.has_kv_transfers_in_flight() or s.connector.has_pending_meta()
        ):
            return None  # a transfer's end (or start) is an event no stretch jumps over
        cfg = self.config
        if (
            s.preempted_req_ids
            or s.num_spec_tokens
            or len(s.running) > cfg.max_num_batched_tokens
            or (self.kv.deferred_frees and self._released_blocks() < 0)
        ):
            return None
        if len(s.waiting) and not self._admits_none():
            return None  # (asked before the scan of the batch: after a finish it is the usual no)
        lag = self.lag  # outputs in flight per request: 0 sync, 1 async
        running_status = RequestStatus.RUNNING
        # a frontier counts recomputed tokens when its request schedules them: one held by a
        # waiting request (the queue's head stays put, `_admits_none`) changes no stretch's schedule
        frontier = s.recompute_frontier
        for r in s.running:
            # async: a request whose (last) prefill chunk is in flight is steady from the next
            # schedule on; the simulator checks that chunk samples its first token
            if (
                r.status != running_status
                or r.num_output_placeholders != lag
                or (r.num_in_flight_tokens != lag if not lag else r.num_in_flight_tokens < 1)
                or r.num_stale_output_tokens
                or r.structured_output
                or r.stop_token_ids
                or r.num_spec_tokens
                or (not lag and r.spec_token_ids)  # (async ignores them: not read)
                or r.num_computed_tokens != r.prompt_len + len(r.output_token_ids) - 1 + lag
                or (frontier and r.request_id in frontier)
            ):
                return None
        return s.running

    def _admits_none(self) -> bool:
        """Whether no schedule of the stretch admits a waiting request, its head asked as
        `_schedule_waiting` asks (`_blocked_queue`); a KV connector's head is never certified."""
        s, cfg = self.sched, self.config
        budget = cfg.max_num_batched_tokens - len(s.running)  # what the decodes leave
        demand = None
        if s.connector is None and budget > 0:  # (the async last schedule may free budget)
            demand = HeadDemand(
                least_budget=budget,
                most_budget=cfg.max_num_batched_tokens,  # the async last schedule may leave some out
                chunked=cfg.enable_chunked_prefill,
                threshold=cfg.long_prefill_token_threshold,  # any schedule's is at least this
                lookahead=s.num_lookahead_tokens,
                full_must_fit=cfg.scheduler_reserve_full_isl,
            )
        return self._blocked_queue(s.waiting.peek_request(), s.running, s.max_num_active, demand)

    def reported_finished_ids(self) -> list[str]:
        """Finished ids the next plan reports."""
        return self.sched.finished_req_ids

    def has_request(self, request_id: str) -> bool:
        """Whether the scheduler still tracks the request."""
        return request_id in self.sched.requests

    def _clear_reported_finishes(self) -> None:
        """The stretch's first plan reported them."""
        self.sched.finished_req_ids = []

    def _first_kv(self, reqs: list[Request], cs: list[int], out0: list[int]) -> list[bool]:
        """The fast-path test of every request's first schedule, in one call."""
        kv = self.kv
        out: list[bool] = []
        for j in range(len(reqs)):  # (compiled: a native call each, no bound method or zip)
            r = reqs[j]
            out.append(not kv.holds_new_tokens(r.request_id, cs[j] + 1, r.prompt_len + out0[j]))
        return out

    def _sched_kv(self, r: Request, total: int, known: int, out0: int, i: int, toks: list[int]) -> bool:
        """_schedule_running's fast-path test, then append_slots where it does not apply."""
        kv = self.kv
        rid = r.request_id
        if kv.holds_new_tokens(rid, total, known):
            return False  # the fast path: nothing to do
        self._set_outputs(r, out0, i, toks)
        r.num_computed_tokens = total - 1
        if not kv.append_slots(r, 1):
            raise AssertionError(f"fast-forward: {rid} found no free block inside its horizon")
        return True

    def _after_advance(self, reqs: list[Request], k: int) -> None:
        """The scheduler's step counter."""
        self.sched.current_step += k

    def skipped_last(self, reqs: list[Request], k: int) -> list[Request]:
        """async: the last schedule skips a request whose in-flight output reaches max_tokens."""
        if not self.lag:
            return []
        return [r for r in reqs if len(r.output_token_ids) + k >= r.max_tokens]

    def _skipped_update(self, r: Request) -> None:
        """update_from_output publishes the blocks its delivered output completed; with no
        schedule in the same iteration to have done it first, a new full block may be left."""
        self.kv.cache_blocks(r, r.num_computed_tokens - r.num_in_flight_tokens)

    def finish(self, reqs: list[Request]) -> list[RequestOutput]:
        """The stretch's last update (its tokens appended by advance): the requests whose last
        token stops them finish, in running order, as update_from_output finishes them."""
        max_model_len = self.config.max_model_len
        outputs: list[RequestOutput] = []
        for r in reqs:
            status = stop_status(r, max_model_len)
            if status is not None:
                self.sched.finish_requests([r.request_id], status)
                outputs.append(RequestOutput(r.request_id, [r.output_token_ids[-1]], status))
        return outputs

    def in_flight_plan(self, reqs: list[Request]) -> StepPlan:
        """The plan the last schedule() of a stretch made (it stays in flight after the jump)."""
        scheduled: dict[str, int] = {}
        for r in reqs:
            scheduled[r.request_id] = 1
        context = scheduled.copy()  # the same keys: a copy overwritten costs less than fresh inserts
        for r in reqs:
            context[r.request_id] = r.num_computed_tokens - 1
        plan = StepPlan(
            step_id=self.sched.current_step - 1,
            num_scheduled_tokens=scheduled,
            total_num_scheduled_tokens=len(reqs),
            context_lens=context,
            spec_decode_tokens={},
            new_req_ids=[],
            resumed_req_ids=[],
            preempted_req_ids=[],
            finished_req_ids=[],
        )
        plan.block_table = self.kv.get_block_ids
        return plan
