"""The step interface's protocols (Policy, Executor) and the optional capabilities a policy may
declare (exact fast-forward, grammar bitmasks, run counters); `registry.py` names policies.

A new policy needs only `Policy` (or `schedsim.policies.baselines.BasePolicy`). A capability is a
second protocol: the simulator asks `isinstance(policy, SupportsFastForward)` and, if so, works
through the companion object the policy hands out, never through the scheduler class itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from .config import SchedulerConfig
from .plan import GrammarOutput, RequestOutput, StepPlan, StepResult
from .request import Request


class RequestRejected(ValueError):
    """A request the policy refuses when it arrives because it could never run (its KV blocks
    exceed the whole pool): the engine records it as rejected, as an engine's frontend refuses a
    request, and the run goes on."""


class EngineFailure(RuntimeError):
    """The engine a policy models would itself fail or hang at this step: a finding about that
    engine, so the policy stops here rather than invent a way out (a run reports it, a sweep
    records it as its point's result)."""

    engine = "the engine"  # whose failure, in the words a report uses
    cause = "failure"  # a short tag: the family's subclasses name theirs

    def __init__(self, step: int, request_ids: Sequence[str], message: str) -> None:
        """`message` says what happened, naming the requests; `step` is the scheduling step. The
        fields are the exception's args, so a copy made from them (pickling across a process pool,
        SimPy re-raising a process's failure) is the same failure."""
        super().__init__(step, list(request_ids), message)
        self.step = step
        self.request_ids = list(request_ids)
        self.message = message

    def __str__(self) -> str:
        """The step, then what happened."""
        return f"step {self.step}: {self.message}"

    def report(self) -> str:
        """What stopped the run, as a report's line says it."""
        return f"{self.engine} itself fails here ({self.cause}), {self}"


@runtime_checkable
class Policy(Protocol):
    """A scheduler: decides each step's plan and folds the step's result back into its requests."""

    config: SchedulerConfig
    # 1 for a synchronous scheduler, 2 for vLLM's AsyncScheduler / SGLang's overlap loop.
    max_concurrent_batches: int

    def add_request(self, request: Request) -> None:
        """Queue a newly arrived request; raise RequestRejected for one that could never run."""

    def abort_requests(self, request_ids: Iterable[str]) -> list[Request]:
        """Finish the given live requests as aborted; unknown or finished ids are ignored."""

    def has_requests(self) -> bool:
        """Unfinished requests, or finished ones not yet reported in a plan."""

    def has_unfinished_requests(self) -> bool:
        """Requests still waiting or running."""

    def schedule(self) -> StepPlan:
        """Plan the next step (may be empty)."""

    def update_from_output(self, plan: StepPlan, result: StepResult) -> list[RequestOutput]:
        """Apply a finished step's result; returns the tokens delivered and the finishes."""

    def update_draft_token_ids(self, drafts: Mapping[str, list[int]]) -> None:
        """Receive drafts proposed for the next step (speculative decoding)."""

    def get_request_counts(self) -> tuple[int, int]:
        """(running, waiting) for the step table."""

    def kv_usage(self) -> float:
        """Fraction of usable KV blocks held by requests."""

    def check_invariants(self) -> None:
        """Raise AssertionError if internal bookkeeping is inconsistent (tests call this)."""


@runtime_checkable
class FastForwardHooks(Protocol):
    """A policy's side of exact fast-forward (schedsim.fastforward), kept next to the policy.

    A stretch is a run of engine-loop iterations in which schedule() gives every running request
    exactly one token and no update finishes one (but, where `finishes_in_last_update`, the
    last). The simulator asks `steady_running` whether the policy is in that state, `horizon` how
    many iterations its own caps allow, and `advance` to apply them at once; every table then
    reads as if the iterations had run one by one (`schedsim.policies.fastforward` shares the
    KV replay that makes this exact).
    """

    # whether a stretch may end with the update that stops requests (then `finish` applies it)
    finishes_in_last_update: bool

    def steady_running(self, depth: int) -> list[Request] | None:
        """The running requests, in batch order, if the next iterations are plain decodes of each
        (requests may wait, when no schedule of the stretch would admit one)."""

    def arrivals_wait(self, longest_prompt: int) -> bool:
        """After `steady_running` said yes: whether requests arriving inside the stretch (none
        with a prompt longer than `longest_prompt`) would wait through it too (the batch is full,
        or the queue's head is blocked whatever joins behind it), so the stretch need not stop at
        an arrival."""

    def horizon(self, reqs: list[Request], limit: int) -> int:
        """Iterations (<= limit) before a length cap stops a request or a KV block runs short."""

    def skipped_last(self, reqs: list[Request], k: int) -> list[Request]:
        """Requests the k-th (last) schedule of a stretch leaves out (async max_tokens)."""

    def reported_finished_ids(self) -> list[str]:
        """Finished ids the next plan reports (the stretch's first plan reports them)."""

    def has_request(self, request_id: str) -> bool:
        """Whether the policy still tracks the request."""

    def advance(
        self, reqs: list[Request], k: int, tokens: list[list[int]], skipped: Sequence[Request] = ()
    ) -> list[float]:
        """Apply k iterations (tokens[j]: request j's next k delivered tokens); returns the KV
        usage seen after each of the k schedules."""

    def finish(self, reqs: list[Request]) -> list[RequestOutput]:
        """The last update's stops, as update_from_output applies them (running order)."""

    def in_flight_plan(self, reqs: list[Request]) -> StepPlan:
        """The plan the stretch's last schedule() made (with two batches, it stays in flight)."""

    def end_stretch(self) -> None:
        """After the jump's polls took their arrivals: leave the requests that wait through the
        stretch where its schedules would have (TensorRT-LLM activates them)."""


@runtime_checkable
class SupportsFastForward(Protocol):
    """Optional: the policy's steady decode stretches can be jumped over in closed form."""

    def fast_forward(self) -> FastForwardHooks:
        """The companion that implements FastForwardHooks for this policy instance."""


@runtime_checkable
class SupportsGrammarBitmask(Protocol):
    """Optional: structured output. vLLM's EngineCore asks the scheduler for the grammar bitmask
    of each step before that step samples (the sampler needs it), so the engine thread fills it
    while the GPU waits to sample."""

    def get_grammar_bitmask(self, plan: StepPlan) -> GrammarOutput | None:
        """The bitmask rows the step's sampling applies, None when it applies none."""


@runtime_checkable
class SupportsAdapters(Protocol):
    """Optional: LoRA adapters shape the schedule (TensorRT-LLM's capacity scheduler counts each
    new adapter's PEFT-cache pages); under any other policy a request's lora_id changes nothing."""

    def budgets_adapters(self) -> bool:
        """Whether this instance budgets adapters (its configuration sets an adapter cache)."""


@runtime_checkable
class HasRunCounters(Protocol):
    """Optional: counts a policy keeps that belong in the run summary but in no table."""

    def run_counters(self) -> Mapping[str, int]:
        """Summary key -> count so far (e.g. TensorRT-LLM's `num_prefix_skips`)."""


@runtime_checkable
class SupportsKVTransfer(Protocol):
    """Optional: the policy serves either side of a prefill/decode pair (see `kv_transfer.py`)."""

    def has_kv_transfers_in_flight(self) -> bool:
        """A load or send is outstanding, so an idle engine must wait for its end, not stop."""

    def decode_takes_prefill_token(self) -> bool:
        """The decode side continues from the prefill's first token (TensorRT-LLM's first_gen_tokens)
        instead of recomputing the last prompt token and sampling it again (vLLM)."""


@runtime_checkable
class Executor(Protocol):
    """Runs steps: `launch` never blocks; `collect` hands back the StepResult of a launched step."""

    def launch(self, plan: StepPlan, requests: Mapping[str, Request]) -> Any:
        """Start computing a plan; returns a handle to wait on."""

    def collect(self, handle: Any) -> StepResult:
        """The result of a launched step (blocks in the real world until it is ready)."""
