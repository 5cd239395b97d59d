"""The SimPy world: resolves the engine's waits in simulated time.

The engine runs as a SimPy process. A CPU phase advances the engine thread's clock by the CPU
model's cost; a Launch puts the step on the GPU, a FIFO server whose start and end times are closed
form (start = max(launch time, end of the previous step), end = start + the latency model's time,
or later when a deferred sample holds the GPU); a WaitStep sleeps until that end. So in sync mode
the GPU idles while the CPU works, and with a batch queue the CPU works while the GPU runs. A Jump
is answered by the world's `jump` hook (the exact fast-forward of `schedsim.fastforward`, which
the run plugs in), or by "no steps jumped".

In a cluster, several worlds share one SimPy environment and each engine's inputs are an `Inbox`
the router process feeds. The engine then lets SimPy catch up to its own clock before every poll
(so every arrival due by then has been routed, and the router saw every replica as it was at the
arrival), and an idle engine waits on its inbox instead of on a known next arrival.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import simpy
from schedsim.engine.loop import Engine, PolicyStuckError
from schedsim.engine.waits import (
    TIMELINE_KIND_OF_PHASE,
    CpuPhase,
    Jump,
    Launch,
    PollInputs,
    Sample,
    WaitArrival,
    WaitStep,
    WaitTransfer,
)
from schedsim.metrics.column import Column
from schedsim.metrics.recorder import KIND_CODES, MetricsRecorder
from schedsim.worlds.executor import SimExecutor, SimStep
from schedsim.worlds.inbox import Inbox
from schedsim.worlds.inputs import InputStream
from schedsim.worlds.kv_port import KVTransferPort

# each CPU phase's timeline kind code
PHASE_CODES = {phase: KIND_CODES[kind] for phase, kind in TIMELINE_KIND_OF_PHASE.items()}


class SimWorld:
    """Runs one engine against a simulated executor, CPU cost model and clock.

    The engine thread's CPU phases are strictly sequential and nothing else observes the engine
    between them, so the engine process keeps its own clock `cpu_now` and only yields to SimPy
    when it waits: for a step to finish or for the next input. The GPU is a FIFO server in closed
    form: a launched step starts at max(its ready time, the end of the step before it) and ends
    `gpu_time` later (a deferred sample holds it until the engine releases it), so every time is
    a plain sum of model costs, with no rounding from SimPy's relative timeouts; that is what lets
    `schedsim.fastforward.stretch` jump many steps and land on the very same floats.
    """

    def __init__(
        self,
        engine: Engine,
        executor: SimExecutor,
        cpu_model: Any,
        inputs: InputStream | Inbox,
        metrics: MetricsRecorder | None = None,
        until: float | None = None,
        on_progress: Callable[[int], None] | None = None,
        jump: Callable[[SimWorld], int] | None = None,
        env: simpy.Environment | None = None,
    ) -> None:
        if env is None:
            env = simpy.Environment(initial_time=min(0.0, inputs.next_time() or 0.0))
        self.env = env
        self.engine, self.executor, self.cpu_model = engine, executor, cpu_model
        self.inputs, self.metrics = inputs, metrics
        # a cluster's replica: inputs come from the router process through an inbox
        self.inbox: Inbox | None = inputs if isinstance(inputs, Inbox) else None
        self.until = math.inf if until is None else until
        self.on_progress = on_progress
        self.cpu_now = self.env.now
        self.gpu_free = -math.inf  # when the GPU finishes the last launched step
        self.finished = False
        # answers a Jump: steps fast-forwarded in closed form (schedsim.fastforward), or none
        self.jump = jump
        # a side of a prefill/decode pair: the cluster's KV transfers (None: no transfers)
        self.kv_port: KVTransferPort | None = None

    def clock(self) -> float:
        """The engine thread's current time (for the metrics recorder)."""
        return self.cpu_now

    def run(self) -> None:
        """Run until the engine loop ends (or until a wait would end after `until`)."""
        self.env.run(until=self.env.process(self._process()))

    def start(self) -> Any:
        """Register the engine's process without running the environment (a cluster's replica:
        the environment runs once every replica and the router are registered)."""
        return self.env.process(self._process())

    def _process(self) -> Any:
        """The engine's SimPy process: the loop, then the clock caught up."""
        yield from self._drive()
        yield from self._catch_up()

    def _sleep(self, t: float) -> Any:
        """Let SimPy's clock follow the engine thread to time t (the thread's clock is exact).

        Only when another SimPy event is due by then: with nothing else scheduled no other process
        can run before the engine resumes, so the clock is left behind (a timeout per step costs
        more than a step's CPU work) and caught up by the next wait that does yield, or at the end.
        """
        env = self.env
        if t > env.now and env.peek() <= t:
            yield env.timeout(t - env.now)

    def _sync(self, t: float) -> Any:
        """Let every other process act up to time t first (a cluster's replica, before it polls)."""
        env = self.env
        if env.peek() <= t:
            yield env.timeout(t - env.now)

    def _catch_up(self) -> Any:
        """At the end of the run: SimPy's clock where the engine thread stopped."""
        env = self.env
        if self.cpu_now > env.now:
            yield env.timeout(self.cpu_now - env.now)

    def _drive(self) -> Any:
        """Feed the engine generator the answers to its waits."""
        gen, phase_time, until = self.engine.run(), self.cpu_model.phase_time, self.until
        record = _cpu_timeline_columns(self.metrics)
        value: Any = None
        while True:
            try:
                wait = gen.send(value)
            except StopIteration:
                self.finished = True
                return
            value = None
            if isinstance(wait, CpuPhase):  # isinstance: compiled, the fields are then native reads
                dt: float = phase_time(wait.kind, wait.num_reqs, wait.num_tokens)
                if dt > 0:
                    start = self.cpu_now
                    self.cpu_now = end = start + dt
                    if record is not None:  # metrics.add_interval, inlined (hot)
                        knd, starts, ends, steps = record
                        knd.append(PHASE_CODES[wait.kind])
                        starts.append(start)
                        ends.append(end)
                        steps.append(wait.step)
            elif isinstance(wait, Launch):
                value = self._launch(wait)
            elif isinstance(wait, WaitStep):
                h: SimStep = wait.handle
                t = h.end if h.end > self.cpu_now else self.cpu_now
                if t > until:
                    return
                yield from self._sleep(t)
                self.cpu_now = t
                value = self.executor.collect(h)
                if self.kv_port is not None:
                    self.kv_port.deliver(value, h.end)
            elif isinstance(wait, PollInputs):
                if self.inbox is not None:
                    yield from self._sync(self.cpu_now)
                value = self.inputs.take(self.cpu_now, wait.aborts_only)
            elif isinstance(wait, Jump):
                value = self.jump(self) if self.jump is not None else 0
            elif isinstance(wait, Sample):
                self._release(wait.handle)
            elif isinstance(wait, WaitArrival) and self.inbox is not None:
                inbox = self.inbox
                due = inbox.next_pending()
                while due is None:  # idle: wait until the router sends something, or never will
                    event = inbox.wait_event()
                    if event is None:
                        break
                    yield event
                    if self.env.now > self.cpu_now:
                        self.cpu_now = self.env.now
                    due = inbox.next_pending()
                if due is not None:
                    t = due if due > self.cpu_now else self.cpu_now
                    if t > until:
                        return
                    yield from self._sync(t)
                    self.cpu_now = t
                    value = inbox.take(t)
            elif isinstance(wait, WaitTransfer):
                port, box = self.kv_port, self.inbox
                if port is None or box is None:
                    raise RuntimeError("a policy has KV transfers in flight outside a prefill/decode cluster")
                while True:  # until a transfer of this replica ends or the router sends something
                    yield from self._sync(self.cpu_now)
                    if port.ready(self.cpu_now) or box.next_pending() is not None:
                        break
                    if not port.busy():
                        raise PolicyStuckError(
                            f"policy {type(self.engine.policy).__name__} waits for KV transfers "
                            "the cluster never started"
                        )
                    yield box.wait_any()
                    if self.env.now > self.cpu_now:
                        self.cpu_now = self.env.now
                if self.cpu_now > until:
                    return
                value = box.take(self.cpu_now)
            elif isinstance(wait, WaitArrival):
                due = self.inputs.next_time()
                if due is not None:
                    t = due if due > self.cpu_now else self.cpu_now
                    if t > until:
                        return
                    yield from self._sleep(t)
                    self.cpu_now = t
                    value = self.inputs.take(t)
            else:
                raise TypeError(f"engine yielded an unknown wait {wait!r}")

    def _launch(self, wait: Launch) -> SimStep:
        """Compute the step now and place it on the GPU's FIFO."""
        h = self.executor.launch(wait.plan, wait.requests, wait.step, wait.defer_sampling)
        if self.gpu_free != self.gpu_free:
            raise RuntimeError("a step was launched before the held sample ahead of it")
        h.ready = self.cpu_now
        h.start = start = h.ready if h.ready > self.gpu_free else self.gpu_free
        if self.kv_port is not None:
            self.kv_port.on_launch(wait.plan, h.ready, start)
        forward_end = start + h.gpu_time
        if self.metrics is not None and h.gpu_time > 0:
            self.metrics.add_interval("gpu", "forward", start, forward_end, h.step)
        if wait.hold_sampling:
            self.gpu_free = math.nan  # the GPU holds until the engine releases the sample
        else:
            self._done(h, forward_end)
        if self.on_progress is not None:
            self.on_progress(wait.step)
        return h

    def _release(self, h: SimStep) -> None:
        """A deferred sample is released now: sampling starts when both forward and release are done,
        and the drafter (if any) runs after it."""
        forward_end = h.start + (h.gpu_time - h.draft_time)
        sample = forward_end if forward_end > self.cpu_now else self.cpu_now
        self._done(h, sample + h.draft_time)

    def _done(self, h: SimStep, end: float) -> None:
        """The step's end is known: the GPU is free from then on."""
        h.end = self.gpu_free = end
        if self.metrics is not None:
            self.metrics.on_step_done(h)


def _cpu_timeline_columns(metrics: MetricsRecorder | None) -> tuple[Column, Column, Column, Column] | None:
    """The recorder's CPU timeline columns (None without a recorder)."""
    if metrics is None:
        return None
    return metrics.cpu_timeline
