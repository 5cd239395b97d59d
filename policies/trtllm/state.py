"""TensorRT-LLM's request state machine and the per-request scheduling view (LlmRequest)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, IntEnum

from ..request import Request


class LlmRequestState(IntEnum):
    """llmRequest.h's states; the values follow chronological order so reaching a state is one `>=`."""

    DISAGG_TRANS_ERROR = -1
    UNKNOWN = 0
    ENCODER_INIT = 1
    DISAGG_CONTEXT_WAIT_SCHEDULER = 7
    DISAGG_GENERATION_INIT = 8
    DISAGG_GENERATION_TRANS_IN_PROGRESS = 9
    CONTEXT_INIT = 10
    DISAGG_CONTEXT_INIT_AND_TRANS = 11
    DISAGG_GENERATION_TRANS_COMPLETE = 12
    GENERATION_IN_PROGRESS = 13
    GENERATION_TO_COMPLETE = 14
    GENERATION_COMPLETE = 20
    DISAGG_CONTEXT_TRANS_IN_PROGRESS = 21
    DISAGG_CONTEXT_COMPLETE = 22
    DISAGG_GENERATION_WAIT_TOKENS = 23


class LlmRequestType(Enum):
    """llmRequest.h's LlmRequestType: colocated, or one side of a disaggregated pair."""

    CONTEXT_AND_GENERATION = 0
    CONTEXT_ONLY = 1
    GENERATION_ONLY = 2


@dataclass(frozen=True, slots=True)
class ScheduleWindow:
    """A scheduler sees a request only while no_schedule_until <= state < no_schedule_after."""

    no_schedule_until: LlmRequestState
    no_schedule_after: LlmRequestState

    def admits(self, state: LlmRequestState) -> bool:
        """Not reached yet and already past are both skipped: two comparisons."""
        return state >= self.no_schedule_until and not state >= self.no_schedule_after


# Capacity scheduling still counts GENERATION_TO_COMPLETE requests (they hold blocks);
# the micro-batch scheduler closes one state earlier so a finishing request never re-enters a batch.
CAPACITY_WINDOW = ScheduleWindow(LlmRequestState.CONTEXT_INIT, LlmRequestState.GENERATION_COMPLETE)
MICRO_BATCH_WINDOW = ScheduleWindow(LlmRequestState.CONTEXT_INIT, LlmRequestState.GENERATION_TO_COMPLETE)

_GENERATION_STATES = (
    LlmRequestState.GENERATION_IN_PROGRESS,
    LlmRequestState.GENERATION_TO_COMPLETE,
    LlmRequestState.DISAGG_GENERATION_TRANS_COMPLETE,
)


class LlmRequest:
    """TensorRT-LLM's view of one request: effective prompt (grows on pause), context cursor, chunk.

    `prompt_len` and `max_new_tokens` are LlmRequest's mPromptLen / mMaxNewTokens: a pause folds the
    generated tokens into the prompt and shrinks the budget, while `request.prompt_len` (the workload
    field) never changes.

    The schedulers read the identity fields and the state predicates of every active request every
    step, while they change only with a state transition: they are plain attributes, the identity
    ones set once, the predicates recomputed by the `state` setter.
    """

    __slots__ = (
        "request",
        "prompt_len",
        "max_new_tokens",
        "_state",
        "context_current_position",
        "context_chunk_size",
        "prepopulated_prompt_len",
        "estimated_reusable_tokens",
        "draft_tokens",
        "expected_snapshot_points",
        "has_run",
        "recompute_watermark",
        "num_delivered",
        "llm_request_type",
        "first_gen_token",
        "scheduled_tokens",
        "scheduled_drafts",
        "request_id",
        "lora_task_id",
        "beam_width",
        "is_context_init_state",
        "is_generation_in_progress_state",
        "is_disagg_generation_init_state",
        "in_capacity_window",
        "in_micro_batch_window",
    )

    def __init__(
        self,
        request: Request,
        prompt_len: int,
        max_new_tokens: int,
        state: LlmRequestState = LlmRequestState.CONTEXT_INIT,
        context_current_position: int = 0,
        context_chunk_size: int = 0,
        expected_snapshot_points: tuple[int, ...] = (),
    ) -> None:
        """The workload request, its effective prompt and budget, and where its context cursor stands."""
        self.request = request
        self.prompt_len = prompt_len
        self.max_new_tokens = max_new_tokens
        self.context_current_position = context_current_position
        self.context_chunk_size = context_chunk_size
        self.prepopulated_prompt_len = 0
        self.estimated_reusable_tokens = 0
        # drafts attached for the next step; a tuple, so a request without any holds the shared
        # empty one (read every step for every request, never a cold object of its own)
        self.draft_tokens: tuple[int, ...] = ()
        self.expected_snapshot_points = expected_snapshot_points
        # True once the request has been handed to the executor at least once since (re)admission.
        self.has_run = False
        # Positions below this had KV before the last pause: computing them again is recompute.
        self.recompute_watermark = 0
        # Output positions already streamed to the client (a truncating pause makes some come again).
        self.num_delivered = 0
        self.llm_request_type = LlmRequestType.CONTEXT_AND_GENERATION
        # generation-only: the token the context phase sampled (context_phase_params.first_gen_tokens),
        # appended when the request turns into a generation after its KV arrived
        self.first_gen_token = -1
        # what the step in flight computes for it: non-draft tokens and drafts (0 with none in flight)
        self.scheduled_tokens = 0
        self.scheduled_drafts = 0
        # ---- identity and workload flags (fixed for the request's life) ----
        self.request_id: str = request.request_id
        # LoRA adapter id; None sorts first, as C++'s nullopt does.
        self.lora_task_id: int | None = request.lora_id
        # Fixed beam width (getBeamWidthByIter for a non-variable beam schedule).
        self.beam_width: int = request.beam_width
        self._state = state
        self.is_context_init_state = False
        self.is_generation_in_progress_state = False
        self.is_disagg_generation_init_state = False
        self.in_capacity_window = False
        self.in_micro_batch_window = False
        self.state = state

    @classmethod
    def from_request(
        cls, request: Request, max_new_tokens: int, snapshot_points: tuple[int, ...] = ()
    ) -> LlmRequest:
        """A fresh request starts in CONTEXT_INIT with the whole prompt as its tentative chunk."""
        return cls(
            request=request,
            prompt_len=request.prompt_len,
            max_new_tokens=max_new_tokens,
            context_chunk_size=request.prompt_len,
            expected_snapshot_points=snapshot_points,
        )

    def __repr__(self) -> str:
        """Id, state and context cursor: what a failing scheduling test needs to see."""
        return (
            f"LlmRequest({self.request_id!r}, {self.state.name}, prompt_len={self.prompt_len}, "
            f"position={self.context_current_position}, chunk={self.context_chunk_size})"
        )

    # ---- state and its predicates ----
    @property
    def state(self) -> LlmRequestState:
        """llmRequest.h's mState."""
        return self._state

    @state.setter
    def state(self, state: LlmRequestState) -> None:
        """A transition recomputes the predicates the schedulers read every step."""
        self._state = state
        # Still computing its (possibly re-folded) prompt.
        self.is_context_init_state = state == LlmRequestState.CONTEXT_INIT
        # Decoding, including the last in-flight step and a finished disagg transfer.
        self.is_generation_in_progress_state = state in _GENERATION_STATES
        # Waiting for the capacity scheduler to allocate the blocks its KV arrives in.
        self.is_disagg_generation_init_state = state == LlmRequestState.DISAGG_GENERATION_INIT
        self.in_capacity_window = CAPACITY_WINDOW.admits(state)
        self.in_micro_batch_window = MICRO_BATCH_WINDOW.admits(state)

    def has_reached_state(self, state: LlmRequestState) -> bool:
        """Chronological enum order makes 'at least this far' a single comparison."""
        return self.state >= state

    @property
    def is_finished(self) -> bool:
        """GENERATION_COMPLETE or later."""
        return self.has_reached_state(LlmRequestState.GENERATION_COMPLETE)

    # ---- disaggregated serving ----
    @property
    def is_context_only_request(self) -> bool:
        """The context (prefill) side of a pair: stops after the context phase, then sends its KV."""
        return self.llm_request_type is LlmRequestType.CONTEXT_ONLY

    @property
    def is_generation_only_request(self) -> bool:
        """The generation (decode) side of a pair: receives the prompt's KV instead of computing it."""
        return self.llm_request_type is LlmRequestType.GENERATION_ONLY

    @property
    def is_disagg_generation_transmission_in_progress(self) -> bool:
        """Its blocks are allocated and the KV is on its way."""
        return self.state == LlmRequestState.DISAGG_GENERATION_TRANS_IN_PROGRESS

    @property
    def is_disagg_generation_transmission_complete(self) -> bool:
        """The KV arrived; the next batch that schedules it turns it into a generation."""
        return self.state == LlmRequestState.DISAGG_GENERATION_TRANS_COMPLETE

    # ---- context cursor (llmRequest.h chunk helpers) ----
    @property
    def context_remaining_length(self) -> int:
        """Prompt tokens whose KV is not computed yet."""
        return self.prompt_len - self.context_current_position

    @property
    def is_first_context_chunk(self) -> bool:
        """Reused prefix counts as already done, so 'first' means 'at the prepopulated position'."""
        return self.context_current_position == self.prepopulated_prompt_len

    @property
    def is_last_context_chunk(self) -> bool:
        """This chunk reaches the end of the prompt (the step that samples the first token)."""
        return self.context_current_position + self.context_chunk_size == self.prompt_len

    def set_context_chunk_size(self, size: int) -> None:
        """Clamped to what remains, as the C++ setter does."""
        if size < 0:
            raise ValueError(f"request {self.request_id}: context chunk size must be >= 0, got {size}")
        self.context_chunk_size = min(size, self.context_remaining_length)

    def move_to_next_context_chunk(self) -> None:
        """Advance the cursor past the computed chunk."""
        self.context_current_position += self.context_chunk_size
        self.context_chunk_size = 0

    def set_prepopulated_prompt_len(self, prepopulated: int, tokens_per_block: int) -> None:
        """Reuse shifts the chunk window right; a non-last chunk's end is floored to a block boundary."""
        if not 0 <= prepopulated < self.prompt_len:
            raise ValueError(
                f"request {self.request_id}: prepopulated prompt length {prepopulated} "
                f"must be in [0, {self.prompt_len})"
            )
        self.prepopulated_prompt_len = prepopulated
        if prepopulated == 0:
            return
        chunk = self.context_chunk_size
        if prepopulated + chunk < self.prompt_len:
            chunk = (prepopulated + chunk) // tokens_per_block * tokens_per_block - prepopulated
        self.context_current_position = prepopulated
        self.set_context_chunk_size(max(chunk, 0))

    # ---- generation ----
    @property
    def max_num_generated_tokens(self) -> int:
        """Tokens beyond the effective prompt (getMaxNumGeneratedTokens)."""
        return self.request.num_tokens - self.prompt_len

    @property
    def num_draft_tokens(self) -> int:
        """Drafts attached for the next step."""
        return len(self.draft_tokens)

    def has_draft_tokens(self) -> bool:
        """Any drafts attached."""
        return bool(self.draft_tokens)

    def discard_draft_tokens(self, n: int) -> None:
        """Drop the last n drafts (they would need another KV block)."""
        if n > 0:
            self.draft_tokens = self.draft_tokens[: max(0, len(self.draft_tokens) - n)]
