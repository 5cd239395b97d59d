"""The engine loop, written once: vLLM EngineCore's `step()` and `step_with_batch_queue()`.

`Engine.run()` is a generator yielding the waits of `schedsim.engine.waits`; a driver (the SimPy world
or a real-time driver) resolves them. With one batch in flight (`step()`), the loop schedules,
launches, blocks on the step and folds its output back before scheduling again, so the device
idles during every CPU phase. With a batch queue of depth d (`step_with_batch_queue`), it schedules
and launches step N+1 before blocking on step N, so the CPU work of one step hides under the
device time of another. Sampling is deferred by one step when the plan has pending structured-
output tokens: the step's forward runs, but its sampling waits until the previous step's output
has been processed (the grammar bitmask needs those tokens). Wherever the sampler applies a grammar
bitmask (a policy with structured output, `SupportsGrammarBitmask`), the engine thread fills it
first, as EngineCore does: right after the launch, or after that update for a deferred batch; the
GPU holds the step's sampling until then.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator, Iterable
from typing import Any, Protocol

from mypy_extensions import mypyc_attr
from schedsim.engine.waits import (
    JUMP,
    POLL,
    POLL_ABORTS,
    WAIT_ARRIVAL,
    WAIT_TRANSFER,
    CpuPhase,
    Inputs,
    Launch,
    Sample,
    WaitStep,
)
from schedsim.policies import (
    Policy,
    Request,
    RequestOutput,
    RequestRejected,
    RequestStatus,
    StepPlan,
    StepResult,
    SupportsGrammarBitmask,
    SupportsKVTransfer,
)
from schedsim.policies.plan import GrammarOutput

Waits = Generator[Any, Any, None]


class EngineObserver(Protocol):
    """What the engine reports as it goes (metrics read the driver's clock when called)."""

    def on_add(self, request: Request) -> None: ...

    def on_schedule(self, step: int, plan: StepPlan) -> None: ...

    def on_update(
        self, step: int, plan: StepPlan, result: StepResult, outputs: list[RequestOutput]
    ) -> None: ...

    def on_abort(self, requests: list[Request]) -> None: ...

    def on_reject(self, request: Request, reason: str) -> None: ...


class NullObserver:
    """Records nothing."""

    def on_add(self, request: Request) -> None:
        pass

    def on_schedule(self, step: int, plan: StepPlan) -> None:
        pass

    def on_update(self, step: int, plan: StepPlan, result: StepResult, outputs: list[RequestOutput]) -> None:
        pass

    def on_abort(self, requests: list[Request]) -> None:
        pass

    def on_reject(self, request: Request, reason: str) -> None:
        pass


@mypyc_attr(native_class=False)  # exceptions stay Python classes when compiled (schedsim.accel)
class PolicyStuckError(RuntimeError):
    """The policy holds requests but schedules nothing and no input can ever change that."""


class Engine:
    """EngineCore's busy loop around one policy; `depth` batches may be in flight."""

    def __init__(
        self,
        policy: Policy,
        observer: EngineObserver | None = None,
        batch_queue_depth: int | None = None,
        check_invariants: bool = False,
        fast_forward: bool = False,
    ) -> None:
        self.policy = policy
        self.observer = observer or NullObserver()
        depth = batch_queue_depth if batch_queue_depth is not None else policy.max_concurrent_batches
        if depth < 1:
            raise ValueError(f"batch_queue_depth must be >= 1, got {depth}")
        self.depth = depth
        self.check_invariants = check_invariants
        self.fast_forward = fast_forward  # yield Jump at the top of each busy iteration
        self.requests: dict[str, Request] = {}  # live requests the executor may need
        self.num_launched = 0
        self.held: list[Request] = []  # arrivals seen while only aborts were taken
        self.batch_queue: deque[tuple[Any, StepPlan, int]] = deque()
        self.idle_empty_plans = 0
        # the policy's grammar bitmasks (vLLM's get_grammar_bitmask), None without grammars
        self.grammar: SupportsGrammarBitmask | None = (
            policy if isinstance(policy, SupportsGrammarBitmask) else None
        )
        # a side of a prefill/decode pair: KV transfers keep an otherwise idle engine alive
        self.kv_transfer: SupportsKVTransfer | None = (
            policy if isinstance(policy, SupportsKVTransfer) else None
        )

    # ---- the busy loop ----
    def run(self) -> Waits:
        """EngineCore.run_busy_loop: take inputs (blocking only when idle), then one step."""
        step = self._step if self.depth == 1 else self._step_with_batch_queue
        while True:
            if self.idle_empty_plans >= 2 or (not self.policy.has_requests() and not self.batch_queue):
                transferring = self._transfers_in_flight()  # nothing to compute until one ends
                inputs = yield (WAIT_TRANSFER if transferring else WAIT_ARRIVAL)
                if inputs is None:  # no input ever again (or the run's time limit)
                    if not transferring and self.policy.has_requests():
                        raise PolicyStuckError(self._stuck_message())
                    return
                self.idle_empty_plans = 0
            else:
                if self.fast_forward and (yield JUMP):
                    continue  # the driver ran whole iterations in closed form
                inputs = yield POLL
            self.apply_inputs(inputs)
            yield from step()

    def _transfers_in_flight(self) -> bool:
        """A KV load or send of this engine is outstanding (it must wait for its end, not stop)."""
        kv = self.kv_transfer
        return kv is not None and kv.has_kv_transfers_in_flight()

    def apply_inputs(self, inputs: Inputs, add: bool = True) -> None:
        """Add new requests (or hold them), then apply aborts."""
        if add:
            for req in self.held + inputs.requests:
                try:
                    self.policy.add_request(req)
                except RequestRejected as exc:  # it could never run: refused, the run goes on
                    self.observer.on_reject(req, str(exc))
                    continue
                self.requests[req.request_id] = req
                self.observer.on_add(req)
            self.held.clear()
        else:
            self.held.extend(inputs.requests)
        if inputs.abort_ids:
            self._abort(inputs.abort_ids)

    def _abort(self, request_ids: Iterable[str]) -> None:
        """Abort live requests; ids of finished or unknown requests do nothing."""
        request_ids = list(request_ids)
        held = {r.request_id for r in self.held}
        ids = [rid for rid in request_ids if rid not in held]
        aborted: list[Request] = []
        if len(ids) < len(request_ids):  # aborted before the policy ever saw them
            gone = set(request_ids)
            for req in self.held:
                if req.request_id in gone:
                    req.status = RequestStatus.FINISHED_ABORTED  # never handed to the policy
                    aborted.append(req)
            self.held = [r for r in self.held if r.request_id not in gone]
        aborted += self.policy.abort_requests(ids)
        for req in aborted:
            self.requests.pop(req.request_id, None)
        if aborted:
            self.observer.on_abort(aborted)

    # ---- shared phases ----
    def _schedule(self) -> Generator[Any, Any, tuple[StepPlan, int]]:
        """schedule() then input preparation, each charged as a CPU phase."""
        plan = self.policy.schedule()
        idx = self.num_launched
        self.num_launched += 1
        n_reqs, n_tok = len(plan.num_scheduled_tokens), plan.total_num_scheduled_tokens
        yield CpuPhase("schedule", n_reqs, n_tok, idx)
        self.observer.on_schedule(idx, plan)
        if self.check_invariants:
            self.check()
        yield CpuPhase("prepare_inputs", n_reqs, n_tok, idx)
        return plan, idx

    def _process_output(self, plan: StepPlan, result: StepResult, idx: int) -> Waits:
        """Copy the result to the host, apply aborts that came in meanwhile, update the policy."""
        n_reqs, n_tok = len(plan.num_scheduled_tokens), plan.total_num_scheduled_tokens
        yield CpuPhase("d2h_copy", n_reqs, n_tok, idx)
        self.apply_inputs((yield POLL_ABORTS), add=False)
        outputs = self.policy.update_from_output(plan, result)
        if self.kv_transfer is not None and (
            result.finished_recving or result.finished_sending or result.failed_kv_load_ids
        ):
            self.idle_empty_plans = 0  # an ended transfer may let the policy schedule again
        yield CpuPhase("update_from_output", n_reqs, n_tok, idx)
        for out in outputs:
            if out.finish_reason is not None:
                self.requests.pop(out.request_id, None)
        self.observer.on_update(idx, plan, result, outputs)
        if self.check_invariants:
            self.check()

    def _grammar_bitmask(self, plan: StepPlan) -> GrammarOutput | None:
        """The step's bitmask rows, if its sampling applies any."""
        if self.grammar is None or not plan.has_structured_output_requests:
            return None
        return self.grammar.get_grammar_bitmask(plan)

    def _fill_bitmask(self, bitmask: GrammarOutput, handle: Any, idx: int) -> Waits:
        """The engine thread fills the bitmask, then lets the step sample."""
        yield CpuPhase("grammar_bitmask", len(bitmask.structured_output_request_ids), bitmask.num_rows, idx)
        yield Sample(handle)

    def _note_progress(self, plan: StepPlan) -> None:
        """Count empty plans made while no queued step computes anything (the loop then waits
        for input: nothing in flight can change the policy's mind)."""
        if plan.total_num_scheduled_tokens or any(
            queued.total_num_scheduled_tokens for _, queued, _ in self.batch_queue
        ):
            self.idle_empty_plans = 0
        else:
            self.idle_empty_plans += 1

    # ---- EngineCore.step ----
    def _step(self) -> Waits:
        """One batch in flight: schedule, launch, wait, update; drafts go back to the policy."""
        if not self.policy.has_requests() and not self._transfers_in_flight():
            return
        plan, idx = yield from self._schedule()
        self._note_progress(plan)
        bitmask = self._grammar_bitmask(plan)
        handle = yield Launch(plan, self.requests, idx, hold_sampling=bitmask is not None)
        if bitmask is not None:
            yield from self._fill_bitmask(bitmask, handle, idx)
        result = yield WaitStep(handle)
        yield from self._process_output(plan, result, idx)
        if result.draft_token_ids and plan.total_num_scheduled_tokens:
            self.policy.update_draft_token_ids(result.draft_token_ids)

    # ---- EngineCore.step_with_batch_queue ----
    def _step_with_batch_queue(self) -> Waits:
        """Fill the batch queue first; block on the oldest step only when full or out of work."""
        queue = self.batch_queue
        deferred: tuple[Any, StepPlan, int] | None = None
        if self.policy.has_requests() or self._transfers_in_flight():
            plan, idx = yield from self._schedule()
            self._note_progress(plan)
            executed = plan.total_num_scheduled_tokens > 0
            defer = executed and plan.pending_structured_output_tokens
            bitmask = self._grammar_bitmask(plan) if executed and not defer else None
            handle = yield Launch(
                plan, self.requests, idx, defer_sampling=defer, hold_sampling=bitmask is not None
            )
            if defer:
                deferred = (handle, plan, idx)
            else:
                if bitmask is not None:
                    yield from self._fill_bitmask(bitmask, handle, idx)
                queue.appendleft((handle, plan, idx))
                if len(queue) < self.depth and (executed or self.policy.has_requests()):
                    return
        elif not queue:
            return
        if queue:
            handle, plan, idx = queue.pop()
            result = yield WaitStep(handle)
            yield from self._process_output(plan, result, idx)
        if deferred is not None:
            bitmask = self._grammar_bitmask(deferred[1])  # after the update: finished requests drop out
            if bitmask is not None:
                yield from self._fill_bitmask(bitmask, deferred[0], deferred[2])
            else:
                yield Sample(deferred[0])
            queue.appendleft(deferred)

    def check(self) -> None:
        """The policy's own invariants plus counters no policy may drive negative."""
        self.policy.check_invariants()
        for req in self.requests.values():
            for name in (
                "num_output_placeholders",
                "num_computed_tokens",
                "num_in_flight_tokens",
                "num_stale_output_tokens",
            ):
                if getattr(req, name) < 0:
                    raise AssertionError(f"request {req.request_id}: {name} = {getattr(req, name)} < 0")

    def _stuck_message(self) -> str:
        """Name the requests a policy can never schedule."""
        running, waiting = self.policy.get_request_counts()
        ids = sorted(self.requests)[:10]
        return (
            f"policy {type(self.policy).__name__} has {running} running and {waiting} waiting "
            f"requests but schedules nothing and no input is left (e.g. {ids}); a prompt "
            "probably needs more KV blocks than the pool has"
        )
