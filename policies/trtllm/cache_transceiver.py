"""The scheduler side of TensorRT-LLM's KV cache transceiver: the disaggregated request states.

A request routed to one side of a prefill/decode pair (`Request.kv_transfer_params`, see
`schedsim.policies.kv_transfer`) is a context-only or a generation-only LlmRequest. PyExecutor
moves them through the DISAGG_* states around its step; the transfers themselves belong to the
cluster, which reports their ends in the StepResult.

Generation-only (decode side):
- DISAGG_GENERATION_INIT: active, holding nothing, until the capacity scheduler admits it among
  `fitting_disagg_gen_init_requests`; `_prepare_disagg_gen_init` then allocates its sequence
  (`addSequence` over the prompt, with block reuse) and `_recv_disagg_gen_cache` starts the
  receive: DISAGG_GENERATION_TRANS_IN_PROGRESS, listed in `plan.kv_reqs_to_recv` with the tokens
  its newly allocated blocks receive (the reused prefix is not sent again);
- `finished_recving` -> DISAGG_GENERATION_TRANS_COMPLETE: the capacity and micro-batch schedulers
  treat it as a generation; the batch that first schedules it turns it into
  GENERATION_IN_PROGRESS and appends the token the context phase sampled
  (`_prepare_disagg_gen_transmission_complete`), so its first step computes that token's KV;
- `failed_kv_load_ids` -> DISAGG_TRANS_ERROR: `_handle_errors` finishes it with an error and
  frees its blocks (nothing arrived, so nothing is stored for reuse).

Context-only (prefill side): the context phase runs as any context and samples the first token;
the request then finishes for the client and leaves the active requests, but `_send_disagg_ctx_cache`
holds its blocks in DISAGG_CONTEXT_TRANS_IN_PROGRESS (`ctx_in_transmission_requests`, listed once
in the next plan's `kv_reqs_to_send`) until `finished_sending` makes it DISAGG_CONTEXT_COMPLETE and
`_terminate_disagg_ctx_finished_requests` frees them (stored for reuse).

An abort of a request whose KV is arriving finishes it at once, but its blocks stay held until the
transfer ends (the transfer still writes them).
"""

from __future__ import annotations

from collections.abc import Collection

from ..plan import StepPlan
from .block_keys import BlockKeys
from .resource_manager import ResourceManager
from .state import LlmRequest, LlmRequestState


class CacheTransceiver:
    """The requests whose KV is in transit, on either side, and their state changes."""

    def __init__(self, resources: ResourceManager, keys: BlockKeys) -> None:
        """Free and allocate through the executor's resource manager."""
        self.resources = resources
        self.keys = keys
        # DISAGG_GENERATION_TRANS_IN_PROGRESS, live, in admission order
        self.receiving: dict[str, LlmRequest] = {}
        # DISAGG_GENERATION_TRANS_COMPLETE, not yet turned into a generation
        self.complete: dict[str, LlmRequest] = {}
        # DISAGG_CONTEXT_TRANS_IN_PROGRESS: finished context-only requests holding their blocks
        self.sending: dict[str, LlmRequest] = {}
        # sends started since the last plan: request id -> prompt tokens held
        self.to_send: dict[str, int] = {}
        # aborted while their KV arrives: the blocks are freed when the transfer ends
        self.release_after_transfer: dict[str, LlmRequest] = {}

    def has_transfers_in_flight(self) -> bool:
        """A receive or a send has not ended yet."""
        return bool(self.receiving or self.sending or self.release_after_transfer)

    def holds(self, request_id: str) -> bool:
        """Blocks of a request no longer live that a transfer still uses."""
        return request_id in self.sending or request_id in self.release_after_transfer

    # ---- generation side ----
    def recv_gen_cache(self, reqs: list[LlmRequest], plan: StepPlan, step: int) -> None:
        """_prepare_disagg_gen_init + _recv_disagg_gen_cache: allocate, then start each receive."""
        self.resources.prepare_disagg_gen_init(reqs, step)
        for req in reqs:
            rid = req.request_id
            req.state = LlmRequestState.DISAGG_GENERATION_TRANS_IN_PROGRESS
            self.receiving[rid] = req
            plan.kv_reqs_to_recv[rid] = req.prompt_len - req.prepopulated_prompt_len

    def finished_recving(self, ids: Collection[str]) -> None:
        """The KV arrived: DISAGG_GENERATION_TRANS_COMPLETE (an aborted one's blocks are freed)."""
        for rid in [r for r in self.receiving if r in ids]:
            req = self.receiving.pop(rid)
            req.state = LlmRequestState.DISAGG_GENERATION_TRANS_COMPLETE
            req.context_current_position = req.prompt_len
            req.context_chunk_size = 0
            req.request.num_computed_tokens = req.prompt_len
            self.complete[rid] = req
        for rid in [r for r in self.release_after_transfer if r in ids]:
            self._release(self.release_after_transfer.pop(rid), store=True)

    def failed_recving(self, ids: Collection[str]) -> list[LlmRequest]:
        """DISAGG_TRANS_ERROR: the live requests whose receive failed (the caller finishes them)."""
        failed = []
        for rid in [r for r in self.receiving if r in ids]:
            req = self.receiving.pop(rid)
            req.state = LlmRequestState.DISAGG_TRANS_ERROR
            failed.append(req)
        for rid in [r for r in self.release_after_transfer if r in ids]:
            self._release(self.release_after_transfer.pop(rid), store=False)
        return failed

    def transmission_complete(self, generations: list[LlmRequest]) -> None:
        """_prepare_disagg_gen_transmission_complete: scheduled TRANS_COMPLETE requests start generating."""
        for req in generations:
            if req.is_disagg_generation_transmission_complete:
                del self.complete[req.request_id]
                req.state = LlmRequestState.GENERATION_IN_PROGRESS
                req.request.output_token_ids.append(req.first_gen_token)

    def forget(self, request_id: str) -> None:
        """A TRANS_COMPLETE request was paused or finished before it generated."""
        self.complete.pop(request_id, None)

    def defer_release(self, req: LlmRequest) -> bool:
        """An abort while the KV arrives: keep the blocks until the transfer ends (True if so)."""
        if self.receiving.pop(req.request_id, None) is None:
            return False
        self.release_after_transfer[req.request_id] = req
        return True

    # ---- context side ----
    def send_ctx_cache(self, req: LlmRequest) -> None:
        """_send_disagg_ctx_cache: a finished context-only request holds its blocks for the send."""
        req.state = LlmRequestState.DISAGG_CONTEXT_TRANS_IN_PROGRESS
        self.sending[req.request_id] = req
        self.to_send[req.request_id] = req.prompt_len

    def take_to_send(self) -> dict[str, int]:
        """The sends the next plan lists (each once)."""
        started, self.to_send = self.to_send, {}
        return started

    def finished_sending(self, ids: Collection[str]) -> None:
        """DISAGG_CONTEXT_COMPLETE: the decode side has the KV; free the blocks, stored for reuse."""
        for rid in [r for r in self.sending if r in ids]:
            req = self.sending.pop(rid)
            req.state = LlmRequestState.DISAGG_CONTEXT_COMPLETE
            self.to_send.pop(rid, None)
            self._release(req, store=True)

    def _release(self, req: LlmRequest, store: bool) -> None:
        """removeSequence once the transfer no longer touches the blocks."""
        if store:
            self.resources.free_resources(req)
        else:
            self.resources.kv.remove_sequence(req.request_id, None)
        self.keys.drop(req.request_id)
