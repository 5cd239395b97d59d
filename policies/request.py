"""The Request: a workload item plus the scheduling state a policy owns."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from .kv_transfer import KVTransferParams


class RequestStatus(IntEnum):
    """vLLM's request statuses in chronological order, so `status > PREEMPTED` means finished."""

    WAITING = 0
    WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR = 1
    WAITING_FOR_REMOTE_KVS = 2
    RUNNING = 3
    PREEMPTED = 4
    FINISHED_STOPPED = 5
    FINISHED_LENGTH_CAPPED = 6
    FINISHED_ABORTED = 7
    FINISHED_IGNORED = 8
    FINISHED_ERROR = 9

    @property
    def is_finished(self) -> bool:
        """Finished statuses sort after every live one."""
        return self > RequestStatus.PREEMPTED


@dataclass(slots=True, eq=False)
class Request:
    """One request: immutable workload fields first, then the state its policy mutates.

    Token content: either `prompt_token_ids` (conformance, real backend) or, in simulation, only
    `prompt_len` plus optional `prompt_block_hashes` (one hash per full prompt block at the
    policy's block size; equal hashes mean equal content, chained by position). A prompt block
    without a given hash is unique to the request.
    """

    request_id: str
    arrival_time: float
    prompt_len: int
    max_tokens: int
    prompt_token_ids: list[int] | None = None
    prompt_block_hashes: tuple[int, ...] | None = None
    eos_token_id: int | None = 2
    ignore_eos: bool = False
    stop_token_ids: tuple[int, ...] = ()
    structured_output: bool = False
    needs_output_history: bool = False
    priority: int = 0
    lora_id: int | None = None
    beam_width: int = 1
    num_spec_tokens: int = 0
    # structured output: the grammar is compiled (vLLM's structured_output_request.grammar is set);
    # until then vLLM keeps the request in WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR
    grammar_ready: bool = True
    # prefill/decode disaggregation: which side of a pair serves this request (None: colocated)
    kv_transfer_params: KVTransferParams | None = None
    # ---- scheduling state (owned by the policy) ----
    status: RequestStatus = RequestStatus.WAITING
    num_computed_tokens: int = 0
    output_token_ids: list[int] = field(default_factory=list)
    spec_token_ids: list[int] = field(default_factory=list)
    num_output_placeholders: int = 0
    num_in_flight_tokens: int = 0
    num_stale_output_tokens: int = 0
    is_prefill_chunk: bool = False
    last_sched_seq: int = -1
    block_hashes: list[int] = field(default_factory=list)
    stop_reason: int | None = None
    # ---- counters for metrics ----
    num_preemptions: int = 0
    num_pauses: int = 0
    num_recomputed_tokens: int = 0
    num_truncated_tokens: int = 0

    def __post_init__(self) -> None:
        """Reject impossible workload items early, naming the field."""
        if self.prompt_token_ids is not None and len(self.prompt_token_ids) != self.prompt_len:
            raise ValueError(
                f"request {self.request_id}: prompt_len {self.prompt_len} != "
                f"len(prompt_token_ids) {len(self.prompt_token_ids)}"
            )
        if self.prompt_len < 1:
            raise ValueError(f"request {self.request_id}: prompt_len must be >= 1")
        if self.max_tokens < 1:
            raise ValueError(f"request {self.request_id}: max_tokens must be >= 1")

    @property
    def num_prompt_tokens(self) -> int:
        """vLLM's name for the prompt length."""
        return self.prompt_len

    @property
    def num_output_tokens(self) -> int:
        """Output tokens delivered so far (placeholders excluded)."""
        return len(self.output_token_ids)

    @property
    def num_tokens(self) -> int:
        """Prompt plus known outputs: what a recompute must compute."""
        return self.prompt_len + len(self.output_token_ids)

    @property
    def num_tokens_with_spec(self) -> int:
        """Known tokens plus the drafts proposed for the next step."""
        return self.prompt_len + len(self.output_token_ids) + len(self.spec_token_ids)

    @property
    def safe_frontier(self) -> int:
        """KV length that depends on no in-flight result: where a stopped request may resume."""
        return self.num_computed_tokens - self.num_output_placeholders

    @property
    def is_finished(self) -> bool:
        """True once the request reached a terminal status."""
        return self.status > RequestStatus.PREEMPTED

    def token_id_at(self, pos: int) -> int | None:
        """Known token at a position (prompt then outputs), or None where only lengths are known."""
        if pos < self.prompt_len:
            return None if self.prompt_token_ids is None else self.prompt_token_ids[pos]
        return self.output_token_ids[pos - self.prompt_len]
