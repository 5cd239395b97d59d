"""StepPlan (vLLM's SchedulerOutput), StepResult (ModelRunnerOutput) and RequestOutput."""

from __future__ import annotations

from dataclasses import dataclass, field

from mypy_extensions import mypyc_attr

from .request import RequestStatus


@mypyc_attr(allow_interpreted_subclasses=True)  # SGLang's plan extends it
@dataclass(slots=True)
class StepPlan:
    """What one step computes; plain data so both worlds and the metrics can read it."""

    step_id: int = -1
    num_scheduled_tokens: dict[str, int] = field(default_factory=dict)
    total_num_scheduled_tokens: int = 0
    # num_computed_tokens of each scheduled request before this step (its context length).
    context_lens: dict[str, int] = field(default_factory=dict)
    # draft token ids (or -1 placeholders in async mode) scheduled for verification.
    spec_decode_tokens: dict[str, list[int]] = field(default_factory=dict)
    # block table of each scheduled request; owned by the KV manager: copy it to keep it.
    block_ids: dict[str, list[int]] = field(default_factory=dict)
    new_req_ids: list[str] = field(default_factory=list)
    resumed_req_ids: list[str] = field(default_factory=list)
    preempted_req_ids: list[str] = field(default_factory=list)
    paused_req_ids: list[str] = field(default_factory=list)
    # requests finished (or aborted) since the previous plan, for the executor to drop.
    finished_req_ids: list[str] = field(default_factory=list)
    has_structured_output_requests: bool = False
    pending_structured_output_tokens: bool = False

    @classmethod
    def make_empty(cls) -> StepPlan:
        """A plan that computes nothing (still one batch in flight when queued)."""
        return cls()

    @property
    def is_empty(self) -> bool:
        """No tokens scheduled."""
        return self.total_num_scheduled_tokens == 0


@dataclass(slots=True)
class StepResult:
    """What one step produced: sampled tokens (synthetic in simulation) and faults."""

    step_id: int = -1
    # accepted drafts followed by the bonus token; empty list for a prefill chunk.
    sampled_token_ids: dict[str, list[int]] = field(default_factory=dict)
    # drafts proposed for the next step (speculative decoding), if any.
    draft_token_ids: dict[str, list[int]] = field(default_factory=dict)
    failed_kv_load_ids: set[str] = field(default_factory=set)
    start_time: float = 0.0
    end_time: float = 0.0


@dataclass(slots=True)
class RequestOutput:
    """Tokens delivered to one request by one update_from_output, and its finish if any."""

    request_id: str
    new_token_ids: list[int]
    finish_reason: RequestStatus | None = None
    stale: bool = False
