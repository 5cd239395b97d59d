"""StepPlan (vLLM's SchedulerOutput), GrammarOutput, StepResult (ModelRunnerOutput), RequestOutput."""

from __future__ import annotations

from dataclasses import dataclass, field

from mypy_extensions import mypyc_attr

from .request import RequestStatus


# init=False with an explicit __init__: compiled (schedsim.accel), a dataclass's generated
# __init__ stays Python code, ~4x slower to call, and these are built once per step.
@mypyc_attr(allow_interpreted_subclasses=True)  # SGLang's plan extends it
@dataclass(slots=True, init=False)
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
    # (source, destination) block ids whose KV the device copies before this step's forward pass
    # (TensorRT-LLM's partial-block reuse copies the matched tokens into a fresh block).
    kv_block_copies: list[tuple[int, int]] = field(default_factory=list)
    new_req_ids: list[str] = field(default_factory=list)
    resumed_req_ids: list[str] = field(default_factory=list)
    preempted_req_ids: list[str] = field(default_factory=list)
    paused_req_ids: list[str] = field(default_factory=list)
    # requests finished (or aborted) since the previous plan, for the executor to drop.
    finished_req_ids: list[str] = field(default_factory=list)
    has_structured_output_requests: bool = False
    pending_structured_output_tokens: bool = False

    def __init__(
        self,
        step_id: int = -1,
        num_scheduled_tokens: dict[str, int] | None = None,
        total_num_scheduled_tokens: int = 0,
        context_lens: dict[str, int] | None = None,
        spec_decode_tokens: dict[str, list[int]] | None = None,
        block_ids: dict[str, list[int]] | None = None,
        kv_block_copies: list[tuple[int, int]] | None = None,
        new_req_ids: list[str] | None = None,
        resumed_req_ids: list[str] | None = None,
        preempted_req_ids: list[str] | None = None,
        paused_req_ids: list[str] | None = None,
        finished_req_ids: list[str] | None = None,
        has_structured_output_requests: bool = False,
        pending_structured_output_tokens: bool = False,
    ) -> None:
        self.step_id = step_id
        self.num_scheduled_tokens = {} if num_scheduled_tokens is None else num_scheduled_tokens
        self.total_num_scheduled_tokens = total_num_scheduled_tokens
        self.context_lens = {} if context_lens is None else context_lens
        self.spec_decode_tokens = {} if spec_decode_tokens is None else spec_decode_tokens
        self.block_ids = {} if block_ids is None else block_ids
        self.kv_block_copies = [] if kv_block_copies is None else kv_block_copies
        self.new_req_ids = [] if new_req_ids is None else new_req_ids
        self.resumed_req_ids = [] if resumed_req_ids is None else resumed_req_ids
        self.preempted_req_ids = [] if preempted_req_ids is None else preempted_req_ids
        self.paused_req_ids = [] if paused_req_ids is None else paused_req_ids
        self.finished_req_ids = [] if finished_req_ids is None else finished_req_ids
        self.has_structured_output_requests = has_structured_output_requests
        self.pending_structured_output_tokens = pending_structured_output_tokens

    @classmethod
    def make_empty(cls) -> StepPlan:
        """A plan that computes nothing (still one batch in flight when queued)."""
        return cls()

    @property
    def is_empty(self) -> bool:
        """No tokens scheduled."""
        return self.total_num_scheduled_tokens == 0


@dataclass(slots=True, init=False)
class GrammarOutput:
    """vLLM's GrammarOutput: the requests whose grammar bitmask rows a step's sampling applies, in
    row order; each owns 1 + num_spec_tokens rows (schedsim has no grammar, so no bitmask)."""

    structured_output_request_ids: list[str]
    num_rows: int

    def __init__(self, structured_output_request_ids: list[str], num_rows: int) -> None:
        self.structured_output_request_ids = structured_output_request_ids
        self.num_rows = num_rows


@dataclass(slots=True, init=False)
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

    def __init__(
        self,
        step_id: int = -1,
        sampled_token_ids: dict[str, list[int]] | None = None,
        draft_token_ids: dict[str, list[int]] | None = None,
        failed_kv_load_ids: set[str] | None = None,
        start_time: float = 0.0,
        end_time: float = 0.0,
    ) -> None:
        self.step_id = step_id
        self.sampled_token_ids = {} if sampled_token_ids is None else sampled_token_ids
        self.draft_token_ids = {} if draft_token_ids is None else draft_token_ids
        self.failed_kv_load_ids = set() if failed_kv_load_ids is None else failed_kv_load_ids
        self.start_time = start_time
        self.end_time = end_time


@dataclass(slots=True, init=False)
class RequestOutput:
    """Tokens delivered to one request by one update_from_output, and its finish if any."""

    request_id: str
    new_token_ids: list[int]
    finish_reason: RequestStatus | None = None
    stale: bool = False

    def __init__(
        self,
        request_id: str,
        new_token_ids: list[int],
        finish_reason: RequestStatus | None = None,
        stale: bool = False,
    ) -> None:
        self.request_id = request_id
        self.new_token_ids = new_token_ids
        self.finish_reason = finish_reason
        self.stale = stale
