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


@dataclass(slots=True, eq=False, init=False)
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
    prompt_token_ids: list[int] | None
    prompt_block_hashes: tuple[int, ...] | None
    eos_token_id: int | None
    ignore_eos: bool
    stop_token_ids: tuple[int, ...]
    structured_output: bool
    needs_output_history: bool
    priority: int
    lora_id: int | None
    beam_width: int
    num_spec_tokens: int
    # structured output: the grammar is compiled (vLLM's structured_output_request.grammar is set);
    # until then vLLM keeps the request in WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR
    grammar_ready: bool
    # prefill/decode disaggregation: which side of a pair serves this request (None: colocated)
    kv_transfer_params: KVTransferParams | None
    # ---- scheduling state (owned by the policy; a new Request starts it afresh) ----
    status: RequestStatus = field(init=False)
    num_computed_tokens: int = field(init=False)
    output_token_ids: list[int] = field(init=False)
    spec_token_ids: list[int] = field(init=False)
    num_output_placeholders: int = field(init=False)
    num_in_flight_tokens: int = field(init=False)
    num_stale_output_tokens: int = field(init=False)
    is_prefill_chunk: bool = field(init=False)
    last_sched_seq: int = field(init=False)
    block_hashes: list[int] = field(init=False)
    block_hash_salt: int = field(init=False)  # names its private blocks (kv_cache.hashing), once computed
    stop_reason: int | None = field(init=False)
    # ---- counters for metrics ----
    num_preemptions: int = field(init=False)
    num_pauses: int = field(init=False)
    num_recomputed_tokens: int = field(init=False)
    num_truncated_tokens: int = field(init=False)

    def __init__(
        self,
        request_id: str,
        arrival_time: float,
        prompt_len: int,
        max_tokens: int,
        prompt_token_ids: list[int] | None = None,
        prompt_block_hashes: tuple[int, ...] | None = None,
        eos_token_id: int | None = 2,
        ignore_eos: bool = False,
        stop_token_ids: tuple[int, ...] = (),
        structured_output: bool = False,
        needs_output_history: bool = False,
        priority: int = 0,
        lora_id: int | None = None,
        beam_width: int = 1,
        num_spec_tokens: int = 0,
        grammar_ready: bool = True,
        kv_transfer_params: KVTransferParams | None = None,
    ) -> None:
        """Written out, not generated: compiled, a dataclass's generated `__init__` runs
        interpreted, and the simulator builds a Request at every arrival."""
        self.request_id, self.arrival_time = request_id, arrival_time
        self.prompt_len, self.max_tokens = prompt_len, max_tokens
        self.prompt_token_ids, self.prompt_block_hashes = prompt_token_ids, prompt_block_hashes
        self.eos_token_id, self.ignore_eos, self.stop_token_ids = eos_token_id, ignore_eos, stop_token_ids
        self.structured_output, self.needs_output_history = structured_output, needs_output_history
        self.priority, self.lora_id, self.beam_width = priority, lora_id, beam_width
        self.num_spec_tokens, self.grammar_ready = num_spec_tokens, grammar_ready
        self.kv_transfer_params = kv_transfer_params
        self.status = RequestStatus.WAITING
        self.num_computed_tokens = 0
        self.output_token_ids = []
        self.spec_token_ids = []
        self.num_output_placeholders = self.num_in_flight_tokens = self.num_stale_output_tokens = 0
        self.is_prefill_chunk = False
        self.last_sched_seq = -1
        self.block_hashes = []
        self.block_hash_salt = -1
        self.stop_reason = None
        self.num_preemptions = self.num_pauses = 0
        self.num_recomputed_tokens = self.num_truncated_tokens = 0
        self._validate()

    def _validate(self) -> None:
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
