"""StepPlan (vLLM's SchedulerOutput), GrammarOutput, StepResult (ModelRunnerOutput), RequestOutput.

Plain classes with an explicit `__init__`, each field declared once there: compiled
(schedsim.accel), a dataclass's generated `__init__` stays interpreted code, 4-6x slower to call,
and these are built once per step (RequestOutput once per request per step).
"""

from __future__ import annotations

from collections.abc import Callable

from mypy_extensions import mypyc_attr

from .request import RequestStatus


@mypyc_attr(allow_interpreted_subclasses=True)  # SGLang's plan extends it
class StepPlan:
    """What one step computes; plain data so both worlds and the metrics can read it."""

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
        kv_reqs_to_recv: dict[str, int] | None = None,
        kv_reqs_to_send: dict[str, int] | None = None,
    ) -> None:
        self.step_id = step_id
        self.num_scheduled_tokens: dict[str, int] = (
            {} if num_scheduled_tokens is None else num_scheduled_tokens
        )
        self.total_num_scheduled_tokens = total_num_scheduled_tokens
        # num_computed_tokens of each scheduled request before this step (its context length).
        self.context_lens: dict[str, int] = {} if context_lens is None else context_lens
        # draft token ids (or -1 placeholders in async mode) scheduled for verification.
        self.spec_decode_tokens: dict[str, list[int]] = (
            {} if spec_decode_tokens is None else spec_decode_tokens
        )
        # the block tables: given, or read through `block_table` (the KV manager's lookup) when
        # first asked for (`block_ids`); a simulated step never reads them
        self._block_ids = block_ids
        self.block_table: Callable[[str], list[int]] | None = None
        # (source, destination) block ids whose KV the device copies before this step's forward pass
        # (TensorRT-LLM's partial-block reuse copies the matched tokens into a fresh block).
        self.kv_block_copies: list[tuple[int, int]] = [] if kv_block_copies is None else kv_block_copies
        self.new_req_ids: list[str] = [] if new_req_ids is None else new_req_ids
        self.resumed_req_ids: list[str] = [] if resumed_req_ids is None else resumed_req_ids
        self.preempted_req_ids: list[str] = [] if preempted_req_ids is None else preempted_req_ids
        self.paused_req_ids: list[str] = [] if paused_req_ids is None else paused_req_ids
        # requests finished (or aborted) since the previous plan, for the executor to drop.
        self.finished_req_ids: list[str] = [] if finished_req_ids is None else finished_req_ids
        self.has_structured_output_requests = has_structured_output_requests
        self.pending_structured_output_tokens = pending_structured_output_tokens
        # disaggregation (see kv_transfer.py): request id -> tokens whose KV this step starts
        # loading from the remote prefill (decode side), or holds for the remote decode to read
        # after finishing (prefill side).
        self.kv_reqs_to_recv: dict[str, int] = {} if kv_reqs_to_recv is None else kv_reqs_to_recv
        self.kv_reqs_to_send: dict[str, int] = {} if kv_reqs_to_send is None else kv_reqs_to_send

    def __repr__(self) -> str:
        return f"StepPlan(step_id={self.step_id}, num_scheduled_tokens={self.num_scheduled_tokens})"

    @property
    def block_ids(self) -> dict[str, list[int]]:
        """Block table of each scheduled request, built on first read so that a simulated step
        (which reads none) pays nothing for them; the lists are the KV manager's own (copy one to
        keep it), so read them before the step's update frees a finished request's."""
        ids = self._block_ids
        if ids is None:
            table = self.block_table
            ids = {} if table is None else {rid: table(rid) for rid in self.num_scheduled_tokens}
            self._block_ids = ids
        return ids

    @classmethod
    def make_empty(cls) -> StepPlan:
        """A plan that computes nothing (still one batch in flight when queued)."""
        return cls()

    @property
    def is_empty(self) -> bool:
        """No tokens scheduled."""
        return self.total_num_scheduled_tokens == 0


class GrammarOutput:
    """vLLM's GrammarOutput: the requests whose grammar bitmask rows a step's sampling applies, in
    row order; each owns 1 + num_spec_tokens rows (schedsim has no grammar, so no bitmask)."""

    def __init__(self, structured_output_request_ids: list[str], num_rows: int) -> None:
        self.structured_output_request_ids = structured_output_request_ids
        self.num_rows = num_rows


class StepResult:
    """What one step produced: sampled tokens (synthetic in simulation) and faults."""

    def __init__(
        self,
        step_id: int = -1,
        sampled_token_ids: dict[str, list[int]] | None = None,
        draft_token_ids: dict[str, list[int]] | None = None,
        failed_kv_load_ids: set[str] | None = None,
        start_time: float = 0.0,
        end_time: float = 0.0,
        finished_sending: set[str] | None = None,
        finished_recving: set[str] | None = None,
    ) -> None:
        self.step_id = step_id
        # accepted drafts followed by the bonus token; empty list for a prefill chunk.
        self.sampled_token_ids: dict[str, list[int]] = {} if sampled_token_ids is None else sampled_token_ids
        # drafts proposed for the next step (speculative decoding), if any.
        self.draft_token_ids: dict[str, list[int]] = {} if draft_token_ids is None else draft_token_ids
        self.failed_kv_load_ids: set[str] = set() if failed_kv_load_ids is None else failed_kv_load_ids
        self.start_time = start_time
        self.end_time = end_time
        # disaggregation (vLLM's KVConnectorOutput): transfers that ended before this step did;
        # sending: the prefill side may free the blocks; recving: the decode side may compute.
        self.finished_sending: set[str] = set() if finished_sending is None else finished_sending
        self.finished_recving: set[str] = set() if finished_recving is None else finished_recving


class RequestOutput:
    """Tokens delivered to one request by one update_from_output, and its finish if any."""

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

    def __repr__(self) -> str:
        finish, stale = self.finish_reason, self.stale
        return f"RequestOutput({self.request_id!r}, {self.new_token_ids}, {finish}, stale={stale})"
