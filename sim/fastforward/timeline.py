"""The times of a fast-forward stretch: the same sums the world makes iteration by iteration.

Each iteration is: poll, schedule and prepare_inputs phases, launch (the GPU starts when both the
CPU and the previous step are done), wait (sync: for this step; async: for the one before), d2h
copy, abort poll, update_from_output. The stretch stops before an iteration whose top poll would
take an input (only an abort, where the policy lets arrivals wait through the stretch), whose
mid-iteration poll would take an abort, or whose wait ends past `until`.
"""

from __future__ import annotations

import math
from typing import Any

from schedsim.latency.base import StepShape
from schedsim.latency.roofline import RooflineModel
from schedsim.policies import Request
from schedsim.worlds.inputs import InputStream
from schedsim.worlds.simpy_world import SimWorld


class StretchTimes:
    """The times of each iteration that are stored (the GPU forward's start and duration, what
    its wait returned, the end of update_from_output), the phase costs, and the rest derived by
    the same sums `_iteration` makes: the clock at an iteration's top is the last one's update
    end (`poll0` for the first), schedule and prepare_inputs end `s` and `p` later, the forward
    ends at start + duration."""

    def __init__(self, poll0: float, s: float, p: float, d0: float, u0: float, d: float, u: float) -> None:
        self.poll0 = poll0  # the clock at the first iteration's top (its poll)
        self.start: list[float] = []  # the forward's start on the GPU
        self.gpu: list[float] = []  # its duration
        self.wait: list[float] = []  # when the wait returned
        self.update: list[float] = []  # end of update_from_output
        # phase costs: schedule, prepare, first d2h and update (the batch before), then steady
        self.s, self.p, self.d0, self.u0, self.d, self.u = s, p, d0, u0, d, u
        # the last iteration's batch and schedule-side costs when retime_last shrank it
        self.last_n = -1
        self.s_last, self.p_last = s, p

    def __len__(self) -> int:
        return len(self.update)

    def pop(self) -> None:
        """Drop the last iteration."""
        self.start.pop()
        self.gpu.pop()
        self.wait.pop()
        self.update.pop()

    def poll(self, i: int) -> float:
        """The clock at iteration i's top."""
        return self.poll0 if i == 0 else self.update[i - 1]

    def _retimed(self, i: int) -> bool:
        """Whether iteration i is the last one and retime_last shrank its schedule."""
        return self.last_n >= 0 and i == len(self.update) - 1

    def sched(self, i: int) -> float:
        """The end of iteration i's schedule()."""
        c = self.poll(i)
        s = self.s_last if self._retimed(i) else self.s
        return c + s if s > 0 else c

    def ready(self, i: int) -> float:
        """The end of iteration i's prepare_inputs: its launch."""
        c = self.sched(i)
        p = self.p_last if self._retimed(i) else self.p
        return c + p if p > 0 else c

    def end(self, i: int) -> float:
        """The end of iteration i's forward on the GPU."""
        return self.start[i] + self.gpu[i]


class _Bounds:
    """What ends a stretch: the next input (the next abort, where arrivals wait through it), the
    next abort the mid-iteration poll takes, `until`."""

    def __init__(self, world: SimWorld, sync: bool, arrivals_wait: bool) -> None:
        inputs = world.inputs
        if arrivals_wait and isinstance(inputs, InputStream):  # an arrival is taken inside; an
            nxt_abort = inputs.next_abort_time()  # abort stops the stretch at either poll
            self.input: float = math.inf if nxt_abort is None else nxt_abort
            self.abort: float = self.input
        else:
            nxt_input = inputs.next_time()
            self.input = math.inf if nxt_input is None else nxt_input
            nxt_abort = inputs.next_abort_poll_time()  # the mid-iteration poll takes only aborts
            self.abort = math.inf if nxt_abort is None else nxt_abort
        self.until: float = world.until
        self.sync = sync


def _iteration(
    b: _Bounds,
    t: StretchTimes,
    c: float,
    gpu_free: float,
    prev_end: float,
    s: float,
    p: float,
    d: float,
    u: float,
    g: float,
) -> bool:
    """Append one iteration's times from the clock before it; False (nothing appended) where it
    may not be jumped."""
    if b.input <= c:
        return False
    c1 = c + s if s > 0 else c
    c2 = c1 + p if p > 0 else c1
    start = c2 if c2 > gpu_free else gpu_free
    end = start + g
    waited = end if b.sync else prev_end  # sync waits on this step, async on the last
    w = waited if waited > c2 else c2
    if w > b.until:
        return False
    c4 = w + d if d > 0 else w
    if b.abort <= c4:
        return False
    t.start.append(start)
    t.gpu.append(g)
    t.wait.append(w)
    t.update.append(c4 + u if u > 0 else c4)
    return True


class DecodeCosts:
    """(schedule, prepare_inputs, d2h_copy, update_from_output) seconds of a step of n plain
    decodes: a function of n alone, asked of the CPU model once per n (each ask is a generic
    call, six a jump)."""

    def __init__(self, cpu_model: Any) -> None:
        self.cpu_model = cpu_model
        self.cache: dict[int, tuple[float, float, float, float]] = {}

    def of(self, n: int) -> tuple[float, float, float, float]:
        """The four phase costs of a step of n decodes."""
        costs = self.cache.get(n)
        if costs is None:
            phase = self.cpu_model.phase_time
            costs = (
                float(phase("schedule", n, n)),
                float(phase("prepare_inputs", n, n)),
                float(phase("d2h_copy", n, n)),
                float(phase("update_from_output", n, n)),
            )
            self.cache[n] = costs
        return costs


def timeline(
    world: SimWorld, costs: DecodeCosts, reqs: list[Request], prev: Any, limit: int, arrivals_wait: bool
) -> StretchTimes:
    """The times of up to `limit` iterations, stopping before one that would see an input (an
    abort, where arrivals wait through the stretch)."""
    n = len(reqs)
    s, p, d, u = costs.of(n)
    d0, u0 = d, u
    if prev is not None:
        m, tok = len(prev[1].num_scheduled_tokens), prev[1].total_num_scheduled_tokens
        if m != n or tok != n:
            phase = world.cpu_model.phase_time
            d0, u0 = float(phase("d2h_copy", m, tok)), float(phase("update_from_output", m, tok))
    c: float = world.cpu_now
    t = StretchTimes(c, s, p, d0, u0, d, u)
    bounds = _Bounds(world, prev is None, arrivals_wait)
    gpu_free: float = world.gpu_free
    prev_end: float = prev[0].end if prev is not None else math.nan
    step_time = DecodeTimes(world.executor.latency_model, reqs)
    for i in range(limit):
        if not _iteration(
            bounds, t, c, gpu_free, prev_end, s, p, d0 if i == 0 else d, u0 if i == 0 else u, step_time.at(i)
        ):
            break
        gpu_free = prev_end = t.end(i)
        c = t.update[i]
    return t


def retime_last(
    world: SimWorld, costs: DecodeCosts, prev: Any, t: StretchTimes, kept: list[Request], arrivals_wait: bool
) -> bool:
    """Redo the last iteration with only `kept` scheduled; False (and it is dropped) where nobody
    is kept or the shorter schedule changes what ends the stretch."""
    i = len(t) - 1
    n = len(kept)
    s, p, _, _ = costs.of(n)
    if i == 0:
        c: float = world.cpu_now
        gpu_free: float = world.gpu_free
        prev_end: float = prev[0].end if prev is not None else math.nan
    else:
        c, gpu_free = t.update[i - 1], t.end(i - 1)
        prev_end = gpu_free
    t.pop()
    if not kept:
        return False
    g = DecodeTimes(world.executor.latency_model, kept).at(i)
    if not _iteration(
        _Bounds(world, prev is None, arrivals_wait),
        t,
        c,
        gpu_free,
        prev_end,
        s,
        p,
        t.d0 if i == 0 else t.d,
        t.u0 if i == 0 else t.u,
        g,
    ):
        return False
    t.last_n, t.s_last, t.p_last = n, s, p
    return True


class DecodeTimes:
    """i -> GPU time of the stretch's i-th step (every context one longer per step): the model's
    closed form where it has one (a native call for the roofline), else step_time on the shape.
    Built from the requests as they stand before the stretch is applied."""

    def __init__(self, model: Any, reqs: list[Request]) -> None:
        self.n = len(reqs)
        total = 0
        for r in reqs:  # (compiled: native reads and adds, no list of boxed contexts)
            total += r.num_computed_tokens
        self.ctx_sum = total
        self.model = model
        self.roofline: RooflineModel | None = model if isinstance(model, RooflineModel) else None
        # the other models' closed form or shape, looked up only for them (generic calls)
        self.closed: Any = None if self.roofline is not None else getattr(model, "decode_step_time", None)
        generic = self.roofline is None and self.closed is None
        self.ctx0: list[int] = [r.num_computed_tokens for r in reqs] if generic else []
        self.shape: StepShape | None = None

    def at(self, i: int) -> float:
        """The i-th step's time (the very float the executor's step_time gives that shape)."""
        roofline = self.roofline
        if roofline is not None:
            return roofline.decode_step_time(self.n, self.ctx_sum + self.n * i)
        if self.closed is not None:
            return float(self.closed(self.n, self.ctx_sum + self.n * i))
        shape = self.shape
        if shape is None:
            shape = self.shape = StepShape()
        shape.decodes = [(x + i, 0) for x in self.ctx0]
        return float(self.model.step_time(shape))
