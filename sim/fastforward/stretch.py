"""Exact fast-forward: many steady decode iterations of the engine loop at once, in closed form.

At the top of an engine-loop iteration the engine yields `Jump`; `fast_forward` then checks that
the next iterations are provably alike: the policy is in a steady decode state (`steady_running`: every
running request decodes one token per step, no schedule admits a waiting request, nothing is
pending) and the executor holds no drafts or KV-load faults for them. Their length k is the
minimum of the policy's horizon (max_tokens and max_model_len caps, free KV blocks for the blocks
the stretch allocates), the oracle's (no EOS is delivered inside the stretch) and the input
horizon (no input is due at any poll inside it, no wait ends past max_sim_time; where the policy
says arrivals wait through the stretch, `arrivals_wait`, only an abort ends it, and the arrivals
are taken at their polls). The head-of-line tracker judges every schedule of the stretch. Inside
the stretch every time is the same sum the world computes step by step (CPU phase costs are
constant for a constant batch; each GPU step's time comes from the latency model on that step's
exact shape), every token is the oracle's, and the KV work goes through the real manager in the
real order (`policies/vllm/fastforward.py`). The jump then writes the same rows step-by-step
simulation writes and leaves the engine, the in-flight queue, the executor and the policy exactly
where k ordinary iterations would have. Tests compare every output table with it on and off.
"""

from __future__ import annotations

from typing import Any, Final

from schedsim.engine.loop import Engine
from schedsim.fastforward.commit import commit_metrics
from schedsim.fastforward.timeline import DecodeCosts, StretchTimes, retime_last, timeline
from schedsim.policies import FastForwardHooks, Request, RequestOutput, StepPlan, StepResult
from schedsim.worlds.executor import RunnerState, SimExecutor, SimStep
from schedsim.worlds.inputs import InputStream
from schedsim.worlds.oracle import TokenDraw
from schedsim.worlds.simpy_world import SimWorld

InFlight = tuple[Any, StepPlan, int]  # a batch-queue entry: handle (a SimStep here), plan, index
MIN_JUMP: Final = 1  # even a one-iteration jump costs less than an ordinary iteration
# With two batches in flight and requests waiting, a jump also builds the in-flight step's plan,
# certifies the queue's head and judges every schedule for head-of-line blocking: one iteration
# then costs more than the iteration itself would (bench/RESULTS.md, "One-iteration jumps").
MIN_QUEUED_ASYNC_JUMP: Final = 2
MAX_JUMP: Final = 4096  # bounds the arrays of one jump


class FastForward:
    """The SimPy world's answer to a Jump: steady stretches of one policy, counted."""

    def __init__(self, hooks: FastForwardHooks, cpu_model: Any) -> None:
        self.hooks = hooks
        self.costs = DecodeCosts(cpu_model)
        self.num_jumps = 0  # stretches jumped
        self.num_jumped_steps = 0  # iterations they covered

    def __call__(self, world: SimWorld) -> int:
        """Jump over as many steady iterations as provably change nothing; returns how many.

        Stretch after stretch: one that ends with finishes usually leaves the rest steady, and
        the next one is taken here rather than after a round trip through the engine loop.
        """
        total = 0
        while True:
            k = self._stretch(world)
            if k == 0:
                return total
            total += k
            self.num_jumps += 1
            self.num_jumped_steps += k

    def _stretch(self, world: SimWorld) -> int:
        """One stretch from the engine's state now (0 where none can start)."""
        engine: Engine = world.engine
        hooks = self.hooks
        queue = engine.batch_queue
        if engine.held or len(queue) != engine.depth - 1:
            return 0
        due = world.inputs.next_time()
        due_now = due is not None and due <= world.cpu_now  # this iteration's poll takes an input
        if due_now and world.inbox is not None:
            return 0
        reqs: list[Request] | None = hooks.steady_running(engine.depth)
        if reqs is None:
            return 0
        # requests arriving inside wait through it (taken at their polls): only an abort ends it
        inputs = world.inputs
        take = isinstance(inputs, InputStream) and hooks.arrivals_wait(inputs.longest_prompt)
        if due_now and not take:
            return 0
        queued = engine.depth > 1 and engine.policy.get_request_counts()[1] > 0
        least = MIN_QUEUED_ASYNC_JUMP if queued else MIN_JUMP
        prev = queue[0] if queue else None
        runners: list[RunnerState] = []  # each request's, looked up once for the whole stretch
        limit = self._executor_horizon(world, reqs, prev, runners)
        if limit >= least:
            limit = hooks.horizon(reqs, limit)
        if limit < least:
            return 0
        times = timeline(world, self.costs, reqs, prev, limit, take)
        k = len(times)
        skipped: list[Request] = hooks.skipped_last(reqs, k) if k else []
        if skipped:  # the last schedule leaves some out (async max_tokens): retime it, or drop it
            left_out = set(skipped)  # (requests hash by identity: no boxed id() per request)
            kept = [r for r in reqs if r not in left_out]
            if not retime_last(world, self.costs, prev, times, kept, take):
                k -= 1
                skipped = []
        if k < least:
            return 0
        self._apply(world, reqs, runners, prev, k, times, skipped, take)
        return k

    def _executor_horizon(
        self, world: SimWorld, reqs: list[Request], prev: InFlight | None, runners: list[RunnerState]
    ) -> int:
        """Iterations before a running request delivers its EOS (0 where the stretch cannot start);
        fills `runners` with the runner state of each request."""
        executor: SimExecutor = world.executor
        oracle, workers, lag = executor.oracle, executor.workers, world.engine.depth - 1
        scheduled: dict[str, int] = {}
        sampled: dict[str, list[int]] | None = None
        if prev is not None:
            handle: SimStep = prev[0]  # (typed: native field reads below)
            plan, result = prev[1], handle.result
            scheduled = plan.num_scheduled_tokens
            if result.failed_kv_load_ids or plan.spec_decode_tokens or result.draft_token_ids:
                return 0
            if len(scheduled) != len(reqs):  # others must have finished since
                hooks = self.hooks
                if sum(1 for rid in scheduled if hooks.has_request(rid)) != len(reqs):
                    return 0
            sampled = result.sampled_token_ids
        k = MAX_JUMP
        kv_fail = oracle.kv_fail
        ends = 1 if self.hooks.finishes_in_last_update else 0  # EOS in the last update
        for r in reqs:
            rid = r.request_id
            out = len(r.output_token_ids)
            w = workers.get(rid)
            if w is None or w.position != out + lag or (kv_fail and rid in kv_fail):
                return 0
            if sampled is not None:  # (the executor samples for the plan's requests only: scheduled)
                toks = sampled.get(rid)
                if toks is None or len(toks) != 1:
                    return 0
            runners.append(w)
            last = w.last
            if r.eos_token_id is not None and not r.ignore_eos and last >= out:
                horizon = last - out + ends  # delivered positions out .. out + k - 1: EOS at most last
                if horizon < k:
                    if horizon < MIN_JUMP:
                        return 0  # an EOS is due now: no need to look further
                    k = horizon
        return k

    def _apply(
        self,
        world: SimWorld,
        reqs: list[Request],
        runners: list[RunnerState],
        prev: InFlight | None,
        k: int,
        times: StretchTimes,
        skipped: list[Request],
        take: bool,
    ) -> None:
        """Move policy, executor, engine, world and metrics k iterations ahead (`take`: with the
        arrivals the stretch's polls take)."""
        engine: Engine = world.engine
        hooks = self.hooks
        executor: SimExecutor = world.executor
        oracle = executor.oracle
        idx0 = engine.num_launched
        delivered: list[list[int]]
        in_flight: list[Any] = []  # token objects, moved as they are (an int read is boxed anew)
        draws: list[TokenDraw] = list(runners)
        if prev is None:  # sync: positions out .. out + k - 1, all sampled inside the stretch
            delivered = oracle.token_rows(reqs, draws, 0, k)
        else:  # async: position `out` is the in-flight step's; the last launch stays in flight
            fresh = oracle.token_rows(reqs, draws, 1, k)
            handle: SimStep = prev[0]
            first: dict[str, list[Any]] = handle.result.sampled_token_ids
            delivered = []
            for j in range(len(reqs)):  # (compiled, an indexed loop beats zip)
                row: list[Any] = fresh[j]
                in_flight.append(row.pop())
                row.insert(0, first[reqs[j].request_id][0])
                delivered.append(row)
        workers = executor.workers
        for rid in hooks.reported_finished_ids():  # the first plan reports them: the worker forgets them
            oracle.forget(rid)
            workers.pop(rid, None)
        usage = hooks.advance(reqs, k, delivered, skipped)
        for w in runners:
            w.position += k
        for r in skipped:
            workers[r.request_id].position -= 1  # not in the last launch
        engine.num_launched += k
        engine.idle_empty_plans = 0  # what the loop records after a non-empty plan
        world.cpu_now = times.update[-1]
        world.gpu_free = times.end(k - 1)
        if prev is not None:
            kept, kept_toks = reqs, in_flight
            if skipped:
                left_out = set(skipped)
                kept = [r for r in reqs if r not in left_out]
                kept_toks = [in_flight[j] for j in range(len(reqs)) if reqs[j] not in left_out]
            engine.batch_queue.clear()
            engine.batch_queue.appendleft(self._in_flight_step(kept, kept_toks, idx0 + k - 1, times))
        waiting = self._queue(world, times, usage, len(reqs), take)
        hooks.end_stretch()
        if world.metrics is not None:
            commit_metrics(world.metrics, reqs, idx0, k, times, usage, waiting, prev is not None)
        if hooks.finishes_in_last_update:
            self._finish_at_end(world, reqs, idx0 + k - 1 - (prev is not None), times)
        if world.on_progress is not None:
            for step in range(idx0 + (-idx0) % 256, idx0 + k, 256):
                world.on_progress(step)
        if engine.check_invariants:
            engine.check()

    def _queue(self, world: SimWorld, t: StretchTimes, usage: list[float], n: int, take: bool) -> list[float]:
        """The waiting side of each iteration, as ordinary ones would leave it: the arrivals its poll
        takes (added as the engine adds them), the waiting count after its schedule, and the
        head-of-line tracker's judgement of that schedule (KV usage `usage[i]`)."""
        engine: Engine = world.engine
        policy = engine.policy
        k = len(t)
        running, waiting = policy.get_request_counts()
        hol = world.metrics.hol if world.metrics is not None else None
        stream = world.inputs
        due = stream.next_time() if take else None
        if due is not None and due > t.poll(k - 1):
            due = None  # nothing arrives inside
        if hol is not None and due is None and hol.count == 0 and hol.pending is None:
            hol.since = t.sched(k - 1)  # nobody waits: the tracker only remembers the last schedule
            return [float(waiting)] * k
        if hol is None and due is None:
            return [float(waiting)] * k
        out: list[float] = []
        last_n = t.last_n if t.last_n >= 0 else n
        for i in range(k):
            c = t.poll(i)
            if due is not None and due <= c:
                engine.apply_inputs(stream.take(c))
                nxt = stream.next_time()
                due = nxt if nxt is not None and nxt <= t.poll(k - 1) else None
                running, waiting = policy.get_request_counts()
            out.append(float(waiting))
            if hol is not None:
                hol.judge(t.sched(i), last_n if i == k - 1 else n, running, usage[i])
        return out

    def _finish_at_end(self, world: SimWorld, reqs: list[Request], step: int, times: StretchTimes) -> None:
        """Requests the last update stops (EOS, output cap) finish there: policy, engine, metrics."""
        outputs: list[RequestOutput] = self.hooks.finish(reqs)
        if not outputs:
            return
        live = world.engine.requests
        for out in outputs:
            live.pop(out.request_id, None)
        if world.metrics is not None:
            world.metrics.on_jump_finishes(step, outputs, times.update[-1])

    def _in_flight_step(
        self, kept: list[Request], toks: list[Any], idx: int, times: StretchTimes
    ) -> InFlight:
        """The batch queue's entry for the stretch's last launch (async), as a real launch builds
        it: the requests it scheduled and the token each samples."""
        plan: StepPlan = self.hooks.in_flight_plan(kept)
        sampled: dict[str, list[int]] = {}
        for j in range(len(kept)):
            sampled[kept[j].request_id] = [toks[j]]
        result = StepResult(step_id=plan.step_id, sampled_token_ids=sampled)
        n = len(kept)
        last = len(times) - 1
        h = SimStep(idx, plan, result, times.gpu[last], num_decode_reqs=n, num_decode_tokens=n)
        h.ready, h.start, h.end = times.ready(last), times.start[last], times.end(last)
        return h, plan, idx
