"""The real-time world: the same engine generator, its waits resolved on a real executor and the wall
clock, recorded into the same metrics tables as the SimPy world.

A CpuPhase is yielded right after the engine thread did that work, so its interval is the wall time
since the previous wait was answered. Input preparation happens inside `executor.launch`, so it is
timed there; the device interval of a step comes from the executor's handle (CUDA events, or the
CPU forward's own stamps). Arrivals are replayed at their trace times (sleeping when idle).
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from schedsim.engine.loop import Engine
from schedsim.engine.waits import (
    TIMELINE_KIND_OF_PHASE,
    CpuPhase,
    Launch,
    PollInputs,
    Sample,
    WaitArrival,
    WaitStep,
)
from schedsim.latency.base import StepShape
from schedsim.metrics.recorder import MetricsRecorder
from schedsim.policies import Request, StepPlan
from schedsim.worlds.simpy_world import InputStream

NAN = math.nan


@dataclass(slots=True, eq=False)
class RealStep:
    """A launched real step: the executor's handle plus what the metrics read (as SimStep)."""

    step: int
    plan: StepPlan
    handle: Any
    defer_sampling: bool = False
    start: float = NAN
    end: float = NAN
    gpu_time: float = 0.0  # the step's interval on the wall clock (end - start)
    device_s: float = 0.0  # the executor's own measure of the step (CUDA events, CPU thread time)
    num_prefill_reqs: int = 0
    num_decode_reqs: int = 0
    num_prefill_tokens: int = 0
    num_decode_tokens: int = 0
    num_spec_tokens: int = 0
    shape: StepShape = field(default_factory=StepShape)
    result: Any = field(default=None, repr=False)


def classify(step: RealStep, requests: Any) -> None:
    """Count decodes (one new token past the prompt) and prefill chunks, as the SimExecutor does,
    and record the step's shape for the latency models."""
    plan = step.plan
    for rid, n in plan.num_scheduled_tokens.items():
        k = len(plan.spec_decode_tokens.get(rid) or ())
        ctx = plan.context_lens.get(rid, 0)
        if n - k == 1 and ctx >= requests[rid].prompt_len:
            step.num_decode_reqs += 1
            step.num_decode_tokens += n
            step.num_spec_tokens += k
            step.shape.decodes.append((ctx, k))
        else:
            step.num_prefill_reqs += 1
            step.num_prefill_tokens += n - k
            step.shape.prefills.append((n - k, ctx))


class RealTimeWorld:
    """Drives one engine on a real executor (anything with launch/collect) in wall-clock time."""

    def __init__(
        self,
        engine: Engine,
        executor: Any,
        inputs: InputStream,
        metrics: MetricsRecorder | None = None,
        until: float | None = None,
        on_progress: Callable[[], None] | None = None,
    ) -> None:
        self.engine, self.executor, self.inputs = engine, executor, inputs
        self.metrics, self.until = metrics, until
        self.on_progress = on_progress  # called after every collected step (a progress bar)
        self.t0 = time.perf_counter()
        self.finished = False
        self.steps: list[RealStep] = []  # collected steps that computed something, in order

    def clock(self) -> float:
        """Seconds since the run started (the metrics' clock)."""
        return time.perf_counter() - self.t0

    def run(self) -> None:
        """Answer the engine's waits until its loop ends (or `until` passes)."""
        self.t0 = time.perf_counter()
        gen = self.engine.run()
        value: Any = None
        mark = 0.0
        while True:
            try:
                wait = gen.send(value)
            except StopIteration:
                self.finished = True
                return
            now = self.clock()
            if self.until is not None and now > self.until:
                gen.close()
                return
            value = self._answer(wait, mark, now)
            mark = self.clock()

    def _answer(self, wait: Any, mark: float, now: float) -> Any:
        """Resolve one wait; CPU phases become busy intervals of the time they took."""
        kind = type(wait)
        if kind is CpuPhase:
            if wait.kind != "prepare_inputs" and self.metrics is not None and now > mark:
                self.metrics.add_interval("cpu", TIMELINE_KIND_OF_PHASE[wait.kind], mark, now, wait.step)
            return None
        if kind is Launch:
            return self._launch(wait)
        if kind is WaitStep:
            return self._collect(wait.handle)
        if kind is PollInputs:
            return self.inputs.take(now, wait.aborts_only)
        if kind is Sample:
            return None  # the real backend has no grammar: sampling never waits
        if kind is WaitArrival:
            nxt = self.inputs.next_time()
            if nxt is None:
                return None
            if nxt > now:
                time.sleep(nxt - now)
            return self.inputs.take(max(nxt, self.clock()))
        raise TypeError(f"engine yielded an unknown wait {wait!r}")

    def _launch(self, wait: Launch) -> RealStep:
        """Start the step; the launch call is the input-preparation phase (minus an inline forward)."""
        step = RealStep(wait.step, wait.plan, None, wait.defer_sampling)
        classify(step, wait.requests)
        start = self.clock()
        step.handle = self.executor.launch(wait.plan, wait.requests)
        prep_end = self._rel(getattr(step.handle, "device_start", NAN))
        if self.metrics is not None:
            end = prep_end if not math.isnan(prep_end) and prep_end >= start else self.clock()
            self.metrics.add_interval("cpu", "prepare_inputs", start, end, wait.step)
        return step

    def _collect(self, step: RealStep) -> Any:
        """Block on the step, then record its device interval."""
        result = self.executor.collect(step.handle)
        h = step.handle
        step.start = self._rel(getattr(h, "device_start", NAN))
        step.end = self._rel(getattr(h, "device_end", NAN))
        if math.isnan(step.end):
            step.start, step.end = self._rel(result.start_time), self.clock()
        step.gpu_time = step.end - step.start
        step.device_s = getattr(h, "device_seconds", 0.0) or step.gpu_time
        if step.plan.total_num_scheduled_tokens:
            self.steps.append(step)
            if self.metrics is not None:
                self.metrics.add_interval("gpu", "forward", step.start, step.end, step.step)
        if self.metrics is not None:
            self.metrics.on_step_done(step)
        if self.on_progress is not None:
            self.on_progress()
        step.result = result
        return result

    def _rel(self, perf_time: float) -> float:
        """A time.perf_counter() stamp on this run's clock."""
        return perf_time - self.t0


def synthesize_prompt(req: Request, block_size: int, vocab_size: int, seed: int) -> list[int]:
    """Token ids for a trace request that has only lengths: blocks with equal trace hashes get equal
    tokens (so prefix caching hits where the trace says), every other token is unique to it."""
    hashes = req.prompt_block_hashes or ()
    tokens: list[int] = []
    for j in range(-(-req.prompt_len // block_size)):
        n = min(block_size, req.prompt_len - j * block_size)
        shared = j < len(hashes) and n == block_size and hashes[j] is not None
        rng = random.Random(f"{seed}:h:{hashes[j]}" if shared else f"{seed}:r:{req.request_id}:{j}")
        tokens += [rng.randrange(3, vocab_size) for _ in range(n)]
    return tokens


def real_requests(
    requests: list[Request], targets: Iterable[int], block_size: int, vocab_size: int, seed: int
) -> list[Request]:
    """Requests the model can run: token ids synthesized where missing, and (random weights never
    say EOS on cue) max_tokens capped at the trace's output length with EOS ignored."""
    out = []
    for req, target in zip(requests, targets, strict=True):
        ids = req.prompt_token_ids or synthesize_prompt(req, block_size, vocab_size, seed)
        out.append(
            dataclasses.replace(
                req, prompt_token_ids=ids, ignore_eos=True, max_tokens=max(1, min(req.max_tokens, target))
            )
        )
    return out
