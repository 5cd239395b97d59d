"""BasePolicy: the Policy protocol's bookkeeping, for the baselines, SGLang and your own policy.

A subclass decides only *what* runs each step, in `schedule_into(plan)`, with a small toolkit:
`prefix_hit(req)` (cached blocks a fresh request would adopt), `allocate(req, n, ...)` (KV for n
more tokens), `allocate_or_preempt(plan, req, n)` (preempting the newest running request until
it fits), `admit(plan, req, n)` (a waiting request joins the batch), `preempt(req)` and
`add_to_plan(plan, req, n)`, and two passes built from them: `decode_running(plan)` (a token
for every running request) and `admit_whole(plan, req, budget)`. The base owns the request table,
the waiting deque and running list, the optimistic `num_computed_tokens` advance at schedule time
(vLLM's `_update_after_schedule`, with output placeholders when more than one batch is in
flight), the stop checks applied to sampled tokens, and the KV frees on finish or abort
(docs/writing-a-policy.md walks through a policy built on it).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from mypy_extensions import mypyc_attr

from ..config import SchedulerConfig
from ..interface import RequestRejected
from ..kv_cache import KVCacheManager, cdiv
from ..plan import RequestOutput, StepPlan, StepResult
from ..recompute import count_recompute, mark_frontier
from ..request import Request, RequestStatus


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled (schedsim.accel); user policies extend it
class BasePolicy:
    """The Policy protocol's plumbing; subclasses implement `schedule_into(plan)`."""

    max_concurrent_batches: int = 1
    clip_max_new_to_pool: bool = False
    scheduling_policies: tuple[str, ...] = ("fcfs",)
    # KVCacheManager's lazy_private: for a policy whose requests look their blocks up only while
    # they hold none (prefix_hit's rule), blocks only their request can know are hashed and mapped
    # only when a preemption frees them
    lazy_private_kv: bool = False

    def __init__(self, config: SchedulerConfig, watermark: float = 0.0) -> None:
        name = type(config).__name__
        if config.num_spec_tokens:
            raise ValueError(
                f"{name}.num_spec_tokens: speculative decoding is not modelled by "
                f"{type(self).__name__}, got {config.num_spec_tokens}"
            )
        if config.long_prefill_token_threshold:
            raise ValueError(
                f"{name}.long_prefill_token_threshold: not a knob of "
                f"{type(self).__name__}, got {config.long_prefill_token_threshold}"
            )
        if config.scheduling_policy not in self.scheduling_policies:
            raise ValueError(
                f"{name}.scheduling_policy: {type(self).__name__} supports "
                f"{self.scheduling_policies}, got {config.scheduling_policy!r}"
            )
        self.config = config
        self.kv = KVCacheManager(
            config.num_gpu_blocks,
            config.block_size,
            config.max_model_len,
            enable_caching=config.enable_prefix_caching,
            watermark=watermark,
            lazy_private=self.lazy_private_kv,
        )
        self.requests: dict[str, Request] = {}
        # num_computed_tokens of each preempted request when it was preempted: what it schedules
        # below that again counts as recomputed (vLLM's recompute frontier)
        self.recompute_frontier: dict[str, int] = {}
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.finished_req_ids: list[str] = []
        self.preempted_req_ids: list[str] = []
        self.step_id = 0

    # ---- intake ----
    def add_request(self, request: Request) -> None:
        """Queue a new request, rejecting ones that could never run with a named field."""
        rid = request.request_id
        if rid in self.requests:
            raise ValueError(f"request {rid}: request_id already queued")
        if request.status != RequestStatus.WAITING or request.num_computed_tokens:
            raise ValueError(f"request {rid}: status must be WAITING with no computed tokens")
        if request.prompt_len >= self.config.max_model_len:
            raise ValueError(
                f"request {rid}: prompt_len {request.prompt_len} leaves no room for an "
                f"output under max_model_len {self.config.max_model_len}"
            )
        # Policies that clip max_tokens to the pool only need the prompt to fit; the others need
        # the longest sequence the request may reach (else it would be preempted forever).
        longest = (
            request.prompt_len + 1
            if self.clip_max_new_to_pool
            else min(request.prompt_len + request.max_tokens - 1, self.config.max_model_len)
        )
        need = cdiv(longest, self.config.block_size)
        if need > self.kv.pool.num_usable_blocks:
            raise RequestRejected(
                f"request {rid}: prompt_len {request.prompt_len} with max_tokens "
                f"{request.max_tokens} needs {need} KV blocks, the pool has "
                f"{self.kv.pool.num_usable_blocks} (num_gpu_blocks)"
            )
        self._queue(request)

    def _queue(self, request: Request) -> None:
        """Register a request and put it at the back of the waiting queue."""
        self.requests[request.request_id] = request
        self.waiting.append(request)

    def abort_requests(self, request_ids: Iterable[str]) -> list[Request]:
        """Finish live requests as aborted, releasing their KV now."""
        aborted = []
        for rid in request_ids:
            req = self.requests.get(rid)
            if req is None or req.is_finished:
                continue
            if req in self.waiting:
                self.waiting.remove(req)
            if req in self.running:
                self.running.remove(req)
            self._on_leave(req)
            self._finish(req, RequestStatus.FINISHED_ABORTED)
            aborted.append(req)
        return aborted

    # ---- queries ----
    def has_unfinished_requests(self) -> bool:
        """Requests still waiting, running or awaiting an in-flight result."""
        return bool(self.requests)

    def has_requests(self) -> bool:
        """Unfinished requests, or finishes not yet reported in a plan."""
        return bool(self.requests) or bool(self.finished_req_ids)

    def get_request_counts(self) -> tuple[int, int]:
        """(running, waiting): everything not waiting counts as running."""
        return len(self.requests) - len(self.waiting), len(self.waiting)

    def kv_usage(self) -> float:
        """Fraction of usable KV blocks held by requests."""
        return self.kv.usage

    def update_draft_token_ids(self, drafts: Mapping[str, list[int]]) -> None:
        """No speculative decoding here: drafts are rejected at config time, so ignore them."""

    # ---- scheduling ----
    def schedule(self) -> StepPlan:
        """Plan one step, then advance the scheduled requests optimistically."""
        plan = self.new_plan()
        plan.step_id = self.step_id
        self.step_id += 1
        self.schedule_into(plan)
        plan.total_num_scheduled_tokens = sum(plan.num_scheduled_tokens.values())
        plan.block_table = self.kv.get_block_ids
        plan.finished_req_ids = self.finished_req_ids
        plan.preempted_req_ids = self.preempted_req_ids
        self.finished_req_ids = []
        self.preempted_req_ids = []
        self._after_schedule(plan)
        return plan

    def new_plan(self) -> StepPlan:
        """The plan class this policy emits."""
        return StepPlan()

    def schedule_into(self, plan: StepPlan) -> None:
        """Fill num_scheduled_tokens and the new and resumed ids (subclasses; the contexts are taken
        after the schedule)."""
        raise NotImplementedError

    def add_to_plan(self, plan: StepPlan, req: Request, num_tokens: int) -> None:
        """Record one scheduled request (its context, what was computed before this step, is taken
        after the schedule)."""
        plan.num_scheduled_tokens[req.request_id] = num_tokens

    def admit(self, plan: StepPlan, req: Request, num_new: int) -> None:
        """Move a waiting request (new or preempted) into the running batch with num_new tokens
        (its KV already allocated)."""
        if self.waiting[0] is req:
            self.waiting.popleft()
        else:
            self.waiting.remove(req)
        resumed = req.status == RequestStatus.PREEMPTED
        req.status = RequestStatus.RUNNING
        self.running.append(req)
        (plan.resumed_req_ids if resumed else plan.new_req_ids).append(req.request_id)
        self.add_to_plan(plan, req, num_new)

    def _after_schedule(self, plan: StepPlan) -> None:
        """vLLM's _update_after_schedule (+ AsyncScheduler's placeholders when batches overlap); the
        plan takes each request's context first (a copy of its table, overwritten, costs less
        than inserting the keys afresh)."""
        asynchronous = self.max_concurrent_batches > 1
        frontier = self.recompute_frontier
        context = plan.context_lens = plan.num_scheduled_tokens.copy()
        for rid, n in plan.num_scheduled_tokens.items():
            req = self.requests[rid]
            context[rid] = req.num_computed_tokens
            if frontier:
                count_recompute(frontier, req, n, req.num_computed_tokens)
            req.num_computed_tokens += n
            req.num_in_flight_tokens += n
            req.is_prefill_chunk = req.num_computed_tokens < req.num_tokens + req.num_output_placeholders
            if asynchronous and not req.is_prefill_chunk:
                req.num_output_placeholders += 1

    def allocate(
        self,
        req: Request,
        num_new_tokens: int,
        hit_blocks: list[int] | None = None,
        hit: int = 0,
        lookahead: int = 0,
    ) -> bool:
        """Allocate KV for `num_new_tokens` more tokens, adopting prefix-hit blocks first."""
        if req.status == RequestStatus.RUNNING and not hit_blocks and not lookahead:
            # a running request's allocate_slots (no watermark), without the general path
            if self.kv.append_slots(req, num_new_tokens):
                return True
        got = self.kv.allocate_slots(
            req,
            num_new_tokens,
            hit,
            hit_blocks or None,
            num_lookahead_tokens=lookahead,
            has_scheduled_reqs=bool(self.running),
        )
        if got is None:
            return False
        req.num_computed_tokens += hit
        return True

    def prefix_hit(self, req: Request) -> tuple[list[int], int]:
        """Cached full blocks a fresh request would adopt (none once it holds blocks)."""
        if req.num_computed_tokens or self.kv.get_block_ids(req.request_id):
            return [], 0
        return self.kv.get_computed_blocks(req)

    def preempt(self, req: Request) -> None:
        """Recompute-preemption: free KV, rewind, mark in-flight output stale (caller requeues)."""
        self._on_leave(req)
        req.status = RequestStatus.PREEMPTED
        mark_frontier(self.recompute_frontier, req.request_id, req.num_computed_tokens)
        req.num_computed_tokens = 0
        req.num_stale_output_tokens = req.num_in_flight_tokens
        req.num_output_placeholders = 0
        req.is_prefill_chunk = False
        req.num_preemptions += 1
        self.preempted_req_ids.append(req.request_id)

    def allocate_or_preempt(self, plan: StepPlan, req: Request, num_new: int) -> tuple[bool, int]:
        """Allocate, preempting the newest running request until it fits.

        Returns (whether `req` got its slots, budget handed back by victims already in the plan).
        """
        returned = 0
        while not self.allocate(req, num_new):
            victim = self.running.pop()
            returned += self._unschedule(plan, victim)
            self.preempt(victim)
            self.waiting.appendleft(victim)  # vLLM: preempted requests go back to the front
            if victim is req:
                return False, returned
        return True, returned

    def decode_running(self, plan: StepPlan) -> int:
        """One token for each running request whose last token is back, in batch order,
        preempting the newest while the pool is short; returns the tokens it added to the plan
        (less the victims' tokens it took back)."""
        tokens = 0
        for req in list(self.running):
            if req.status != RequestStatus.RUNNING or req.num_tokens <= req.num_computed_tokens:
                continue  # preempted earlier in this pass, or its last token is still in flight
            ok, returned = self.allocate_or_preempt(plan, req, 1)
            tokens -= returned
            if not ok:
                break
            self.add_to_plan(plan, req, 1)
            tokens += 1
        return tokens

    def admit_whole(self, plan: StepPlan, req: Request, budget: int) -> int:
        """Admit a waiting request with all its uncached tokens if they fit `budget` and the KV
        cache; returns the tokens scheduled (0: it stays waiting)."""
        hit_blocks, hit = self.prefix_hit(req)
        num_new = req.num_tokens - hit
        if num_new > budget or not self.allocate(req, num_new, hit_blocks, hit):
            return 0
        self.admit(plan, req, num_new)
        return num_new

    def _unschedule(self, plan: StepPlan, req: Request) -> int:
        """Take a victim's tokens back out of this step's plan; returns them."""
        return plan.num_scheduled_tokens.pop(req.request_id, 0)

    def _on_leave(self, req: Request) -> None:
        """Release everything a request holds (subclasses add slots)."""
        self.kv.free(req)

    # ---- results ----
    def update_from_output(self, plan: StepPlan, result: StepResult) -> list[RequestOutput]:
        """Fold a step's sampled tokens into its requests; stale or finished ones are dropped."""
        outputs: list[RequestOutput] = []
        sampled = result.sampled_token_ids
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
                continue
            if req.num_output_placeholders:
                req.num_output_placeholders -= 1
            out = self._append_tokens(req, tokens)
            if out is not None:
                outputs.append(out)
        for rid in sorted(result.failed_kv_load_ids):
            req = self.requests.get(rid)
            if req is not None:
                self.stop_request(req, RequestStatus.FINISHED_ERROR)
                outputs.append(RequestOutput(rid, [], RequestStatus.FINISHED_ERROR))
        self._after_update(plan)
        return outputs

    def _after_update(self, plan: StepPlan) -> None:
        """Hook run after a result is folded in (subclasses)."""

    def _append_tokens(self, req: Request, tokens: list[int]) -> RequestOutput | None:
        """Append tokens one by one with stop checks (`check_stop`)."""
        outs = req.output_token_ids
        status = None
        n = 0
        objs: list[Any] = tokens  # append the sampled objects (an int would be boxed anew)
        for i in range(len(tokens)):
            outs.append(objs[i])
            n += 1
            status = self.check_stop(req, tokens[i])
            if status is not None:
                break
        new = tokens if n == len(tokens) else tokens[:n]  # the sampled list itself when whole
        if req.num_output_placeholders and status is not None:
            req.num_output_placeholders = 0
        if status is not None:
            self.stop_request(req, status)
        kv = self.kv
        if kv.enable_caching:  # publish blocks the update completed (cache_blocks' own no-op test first)
            done = req.num_computed_tokens - req.num_in_flight_tokens
            rid = req.request_id
            if done // kv.block_size > kv.num_cached_block.get(rid, 0) and rid in kv.req_to_blocks:
                kv.cache_blocks(req, done)
        return RequestOutput(req.request_id, new, status)

    def max_new_tokens(self, req: Request) -> int:
        """The output cap this policy enforces: max_tokens, clipped to an empty pool if configured.

        Policies that reserve KV to completion (orca, static) clip so that every request can be
        admitted into an empty pool; SGLang clips at intake the same way.
        """
        if not self.clip_max_new_to_pool:
            return req.max_tokens
        pool_tokens = self.kv.pool.num_usable_blocks * self.config.block_size
        return max(1, min(req.max_tokens, pool_tokens - req.prompt_len))

    def check_stop(self, req: Request, tok: int) -> RequestStatus | None:
        """The engines' stop order (vLLM's check_stop, SGLang's update_finish_state): EOS, then
        stop token ids, then the length caps, so an EOS sampled as the last allowed token is a stop."""
        eos = req.eos_token_id
        if eos is not None and tok == eos and not req.ignore_eos:
            return RequestStatus.FINISHED_STOPPED
        stops = req.stop_token_ids
        if stops and tok in stops and self.stop_ids_apply(req):
            req.stop_reason = tok
            return RequestStatus.FINISHED_STOPPED
        if req.num_output_tokens >= self.max_new_tokens(req) or req.num_tokens >= self.kv.max_model_len:
            return RequestStatus.FINISHED_LENGTH_CAPPED
        return None

    def stop_ids_apply(self, req: Request) -> bool:
        """Whether the request's stop token ids stop it (vLLM: always; SGLang: not with ignore_eos)."""
        return True

    def stop_request(self, req: Request, status: RequestStatus) -> None:
        """A request stopped (sampled stop, or its KV load failed): leave the queues, free, report."""
        if req.status == RequestStatus.RUNNING:  # a queue holds only its own statuses (check_invariants)
            remove_identical(self.running, req)  # (SGLang: an extend batch's request joins it a step later)
        elif req in self.waiting:
            self.waiting.remove(req)
        req.status = status  # finished before its blocks go: nobody maps what only it could hit
        self._on_leave(req)
        self._finish(req, status)

    def _finish(self, req: Request, status: RequestStatus) -> None:
        """Terminal status; the id is reported in the next plan."""
        req.status = status
        req.num_output_placeholders = 0
        self.requests.pop(req.request_id, None)
        self.recompute_frontier.pop(req.request_id, None)
        self.finished_req_ids.append(req.request_id)
        self.kv.drop_request(req)

    # ---- checks ----
    def check_invariants(self) -> None:
        """KV conservation, and every live request's blocks cover what it has computed."""
        self.kv.check_invariants()
        self.check_requests()

    def check_requests(self) -> None:
        """Queues hold live requests in their statuses, and only running ones hold KV (the checks a
        policy built on this one keeps under its own KV structures')."""
        bs = self.config.block_size
        waiting_ids = {r.request_id for r in self.waiting}
        assert len(waiting_ids) == len(self.waiting), "a request is queued twice"
        running_ids = {r.request_id for r in self.running}
        assert not waiting_ids & running_ids, "a request is both waiting and running"
        assert (waiting_ids | running_ids) <= set(self.requests), "a queued request is not live"
        assert set(self.recompute_frontier) <= set(self.requests), "a finished request keeps a frontier"
        check_queue_statuses(self.waiting, self.running)
        for rid, blocks in self.kv.req_to_blocks.items():
            assert rid in self.requests, f"{rid}: finished request still holds KV"
            req = self.requests[rid]
            assert len(blocks) >= cdiv(req.num_computed_tokens, bs), f"{rid}: blocks do not cover computed"
        for req in self.requests.values():
            assert not req.is_finished, f"{req.request_id}: finished but live"
            assert req.num_in_flight_tokens >= 0 and req.num_output_placeholders >= 0, req.request_id
            assert req.num_computed_tokens <= req.num_tokens + req.num_output_placeholders, req.request_id
            if req.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED):
                assert req.num_computed_tokens == 0 and not self.kv.get_block_ids(req.request_id), (
                    f"{req.request_id}: waiting request holds KV"
                )


def check_queue_statuses(waiting: Iterable[Request], running: Iterable[Request]) -> None:
    """Waiting requests are WAITING or PREEMPTED and running ones RUNNING (`stop_request` looks a
    request up in the one queue its status names)."""
    for req in waiting:
        assert req.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED), (
            f"{req.request_id}: waiting as {req.status.name}"
        )
    for req in running:
        assert req.status == RequestStatus.RUNNING, f"{req.request_id}: running as {req.status.name}"


def remove_identical(queue: list[Request], req: Request) -> None:
    """Take `req` out of `queue` if it is there: one pass comparing identities (`in` then
    `remove` make two, each calling the rich comparison on every request passed)."""
    for i in range(len(queue)):
        if queue[i] is req:
            del queue[i]
            return
