"""The SimPy world: resolves the engine's waits in simulated time.

Two processes share one clock. The engine process runs the engine generator: a CPU phase advances
the engine thread's clock by the CPU model's cost, a Launch puts the step on the GPU's queue and
returns at once, a WaitStep blocks until the GPU process has finished that step. The GPU process
takes steps in launch order and spends the latency model's time on each; a step with deferred sampling holds
the GPU after its forward until the engine releases it. So in sync mode the GPU idles while the
CPU works, and with a batch queue the CPU works while the GPU runs.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import simpy

from .engine import Engine
from .executor import SimExecutor, SimStep
from .metrics import MetricsRecorder
from .policies import Request
from .waits import CpuPhase, Inputs, Launch, PollInputs, Sample, WaitArrival, WaitStep

# event kinds in the input stream
ARRIVAL, ABORT = 0, 1


class InputStream:
    """Arrivals and client aborts sorted by time; hands out what is due."""

    def __init__(self, arrivals: Sequence[Request], aborts: Sequence[tuple[float, str]]) -> None:
        events = [(r.arrival_time, ARRIVAL, i, r) for i, r in enumerate(arrivals)]
        events += [(t, ABORT, i, rid) for i, (t, rid) in enumerate(aborts)]
        events.sort(key=lambda e: (e[0], e[1], e[2]))
        self.times = [e[0] for e in events]
        self.kinds = [e[1] for e in events]
        self.items = [e[3] for e in events]
        self.pos = 0

    def next_time(self) -> float | None:
        """Time of the next input, None when exhausted."""
        return self.times[self.pos] if self.pos < len(self.times) else None

    def take(self, now: float, aborts_only: bool = False) -> Inputs:
        """Inputs due by `now`; with aborts_only, requests due are left in the stream."""
        times, pos = self.times, self.pos
        n = len(times)
        out = Inputs()
        if pos >= n or times[pos] > now:
            return out  # nothing due (most polls)
        while pos < n and times[pos] <= now:
            if self.kinds[pos] == ABORT:
                out.abort_ids.append(self.items[pos])
            elif aborts_only:
                break  # later aborts stay queued behind this arrival, in order
            else:
                out.requests.append(self.items[pos])
            pos += 1
        self.pos = pos
        return out


class SimWorld:
    """Runs one engine against a simulated executor, CPU cost model and clock.

    The engine thread's CPU phases are strictly sequential and nothing else observes the engine
    between them, so the engine process keeps its own clock `cpu_now` ahead of SimPy's and only
    yields to SimPy when it must meet another process: blocking on a step, releasing a deferred
    sample, or sleeping until an arrival. A launch carries its ready time to the GPU process.
    """

    def __init__(self, engine: Engine, executor: SimExecutor, cpu_model: Any, inputs: InputStream,
                 metrics: MetricsRecorder | None = None, until: float | None = None,
                 on_progress: Callable[[int], None] | None = None) -> None:
        self.env = simpy.Environment(initial_time=min(0.0, inputs.next_time() or 0.0))
        self.engine, self.executor, self.cpu_model = engine, executor, cpu_model
        self.inputs, self.metrics, self.until = inputs, metrics, until
        self.on_progress = on_progress
        self.cpu_now = self.env.now
        self._gpu_queue: deque[SimStep] = deque()
        self._gpu_wake: Any = None  # event the idle GPU process sleeps on
        self.finished = False

    def clock(self) -> float:
        """The engine thread's current time (for the metrics recorder)."""
        return self.cpu_now

    def run(self) -> None:
        """Run until the engine loop ends (or `until`)."""
        self.env.process(self._gpu())
        proc = self.env.process(self._drive())
        self.env.run(until=proc if self.until is None else min_event(self.env, proc, self.until))

    def _catch_up(self) -> Any:
        """Advance SimPy's clock to the engine thread's."""
        if self.cpu_now > self.env.now:
            yield self.env.timeout(self.cpu_now - self.env.now)

    def _drive(self) -> Any:
        """Feed the engine generator the answers to its waits."""
        env, gen, phase_time = self.env, self.engine.run(), self.cpu_model.phase_time
        record = _interval_appenders(self.metrics)
        value: Any = None
        while True:
            try:
                wait = gen.send(value)
            except StopIteration:
                self.finished = True
                return
            value = None
            kind = type(wait)
            if kind is CpuPhase:
                dt = phase_time(wait.kind, wait.num_reqs, wait.num_tokens)
                if dt > 0:
                    start = self.cpu_now
                    self.cpu_now = end = start + dt
                    if record is not None:  # metrics.add_interval, inlined (hot)
                        res, knd, starts, ends, steps = record
                        res("cpu")
                        knd(wait.kind)
                        starts(start)
                        ends(end)
                        steps(wait.step)
            elif kind is Launch:
                value = self._launch(wait)
            elif kind is WaitStep:
                if self.cpu_now > env.now:  # _catch_up, inlined (hot)
                    yield env.timeout(self.cpu_now - env.now)
                h: SimStep = wait.handle
                if h.end != h.end:  # NaN: still running
                    h.world[0] = env.event()
                    yield h.world[0]
                self.cpu_now = env.now
                value = self.executor.collect(h)
            elif kind is PollInputs:
                value = self.inputs.take(self.cpu_now, wait.aborts_only)
            elif kind is Sample:
                yield from self._catch_up()
                wait.handle.world[1].succeed()
            elif kind is WaitArrival:
                yield from self._catch_up()
                value = yield from self._wait_arrival()
                self.cpu_now = env.now
            else:
                raise TypeError(f"engine yielded an unknown wait {wait!r}")

    def _wait_arrival(self) -> Any:
        """Sleep until the next input; None when the stream is exhausted."""
        t = self.inputs.next_time()
        if t is None:
            return None
        if t > self.env.now:
            yield self.env.timeout(t - self.env.now)
        return self.inputs.take(self.env.now)

    def _launch(self, wait: Launch) -> SimStep:
        """Compute the step now; the GPU process decides when it completes."""
        h = self.executor.launch(wait.plan, wait.requests, wait.step, wait.defer_sampling)
        h.ready = self.cpu_now
        h.world = [None, self.env.event() if wait.defer_sampling else None]
        self._gpu_queue.append(h)
        if self._gpu_wake is not None:
            wake, self._gpu_wake = self._gpu_wake, None
            wake.succeed()
        if self.on_progress is not None:
            self.on_progress(wait.step)
        return h

    def _gpu(self) -> Any:
        """The device: one step at a time, in launch order, each no earlier than its launch."""
        env, metrics, queue = self.env, self.metrics, self._gpu_queue
        record = _interval_appenders(metrics)
        while True:
            if not queue:
                self._gpu_wake = env.event()
                yield self._gpu_wake
            h = queue.popleft()
            h.start = max(env.now, h.ready)
            if h.start + h.gpu_time > env.now:
                yield env.timeout(h.start + h.gpu_time - env.now)
            if record is not None and h.gpu_time > 0:  # metrics.add_interval, inlined (hot)
                res, knd, starts, ends, steps = record
                res("gpu")
                knd("forward")
                starts(h.start)
                ends(h.start + h.gpu_time)
                steps(h.step)
            sample = h.world[1]
            if sample is not None and not sample.triggered:
                yield sample
            h.end = env.now
            if metrics is not None:
                metrics.on_step_done(h)
            if h.world[0] is not None:
                h.world[0].succeed()


def _interval_appenders(metrics: MetricsRecorder | None) -> tuple[Callable[[Any], None], ...] | None:
    """The append methods of the recorder's timeline columns (None without a recorder)."""
    if metrics is None:
        return None
    return tuple(col.append for col in metrics.timeline)


def min_event(env: simpy.Environment, proc: Any, until: float) -> Any:
    """An event firing when `proc` ends or at time `until`, whichever is first."""
    stop = env.timeout(max(0.0, until - env.now))
    return env.any_of([proc, stop]) if not math.isinf(until) else proc
