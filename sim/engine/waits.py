"""The wait protocol between the engine loop and the world that drives it.

The engine loop (`schedsim.engine.loop.Engine.run`) is a generator. Every value it yields is one of the
plain objects below; the driver resolves it and sends the answer back with `gen.send(value)`:

| yielded            | the driver does                                            | sends back          |
|--------------------|------------------------------------------------------------|---------------------|
| `CpuPhase`         | spends the CPU time of that phase (simulated or real)      | None                |
| `Launch`           | starts the step on the device without blocking             | a handle (any)      |
| `Sample`           | lets a launched step whose sampling is held sample now      | None                |
| `WaitStep`         | blocks until that launched step has finished               | its StepResult      |
| `PollInputs`       | hands over the inputs that arrived by now, without blocking | Inputs              |
| `WaitArrival`      | blocks until the next input arrives                        | Inputs, or None (*) |
| `Jump`             | fast-forwards steady decode steps in closed form (or none)  | steps jumped (int)  |
| `WaitTransfer`     | blocks until a KV transfer of it ends or an input arrives  | Inputs, or None (*) |

(*) None means no input will ever arrive again; the loop then ends.

A CpuPhase is yielded right after the work it stands for was done on the (single) engine thread, so
a real-time driver may simply record the elapsed time since the previous wait; the simulated world
instead advances its clock by the CPU model's cost. The same yields, in the same order, happen in
both worlds, so their timelines can be compared row by row. None of these objects is a SimPy or a
torch object; handles are whatever the driver returned from Launch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schedsim.policies import Request, StepPlan

CPU_PHASE_KINDS = ("schedule", "prepare_inputs", "d2h_copy", "update_from_output", "grammar_bitmask")
# the timeline's kind of each phase: the grammar bitmask is an input of the sampler, so it shows
# as input preparation of its step (the timeline's kinds are fixed)
TIMELINE_KIND_OF_PHASE = {kind: kind for kind in CPU_PHASE_KINDS} | {"grammar_bitmask": "prepare_inputs"}


# The waits built every step are plain classes with an explicit __init__: compiled, a dataclass's
# generated __init__ stays interpreted code, 4-6x slower to call.
class CpuPhase:
    """The engine thread did one phase of work for step `step` (kind in CPU_PHASE_KINDS)."""

    def __init__(self, kind: str, num_reqs: int, num_tokens: int, step: int = -1) -> None:
        self.kind, self.num_reqs, self.num_tokens, self.step = kind, num_reqs, num_tokens, step


class Launch:
    """Start computing `plan` (the `step`-th launch); with `hold_sampling` its sampling waits for a
    Sample: a deferred batch (vLLM's, `defer_sampling`: the previous step's output is needed first)
    or a grammar bitmask the engine thread is still filling."""

    def __init__(
        self,
        plan: StepPlan,
        requests: dict[str, Request],  # the engine's live requests (compiled: a dict's own lookup)
        step: int,
        defer_sampling: bool = False,
        hold_sampling: bool = False,
    ) -> None:
        self.plan, self.requests, self.step, self.defer_sampling = plan, requests, step, defer_sampling
        self.hold_sampling = hold_sampling or defer_sampling


@dataclass(slots=True)
class Sample:
    """Release the held sampling of a launched step (its grammar bitmask is now filled)."""

    handle: Any


class WaitStep:
    """Block until the launched step behind `handle` is done; answered with its StepResult."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle


@dataclass(slots=True, frozen=True)
class PollInputs:
    """Take the inputs that arrived by now; with aborts_only, new requests stay queued."""

    aborts_only: bool = False


@dataclass(slots=True, frozen=True)
class WaitArrival:
    """Nothing to do: block until the next input (request or abort) arrives."""


class Inputs:
    """New requests and client aborts, in arrival order."""

    def __init__(self, requests: list[Request] | None = None, abort_ids: list[str] | None = None) -> None:
        self.requests: list[Request] = [] if requests is None else requests
        self.abort_ids: list[str] = [] if abort_ids is None else abort_ids

    def __bool__(self) -> bool:
        return bool(self.requests or self.abort_ids)


@dataclass(slots=True, frozen=True)
class Jump:
    """Fast-forward: the engine is at the top of its loop in a steady decode state (see fastforward)."""


@dataclass(slots=True, frozen=True)
class WaitTransfer:
    """Nothing to schedule, but KV transfers are in flight (a prefill/decode pair): block until
    one of this engine's transfers ends or an input arrives."""


POLL = PollInputs()
POLL_ABORTS = PollInputs(aborts_only=True)
WAIT_ARRIVAL = WaitArrival()
JUMP = Jump()
WAIT_TRANSFER = WaitTransfer()
