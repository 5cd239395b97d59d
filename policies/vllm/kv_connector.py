"""The scheduler side of vLLM 0.33.0's NIXL KV connector (pull mode, `NixlPullConnectorScheduler`).

A request's `kv_transfer_params` (see `kv_transfer.py`) say which side of a prefill/decode pair
the replica serves for it:
- decode side (`do_remote_prefill`): `get_num_new_matched_tokens` offers every prompt token the
  local prefix cache does not hold, loaded asynchronously; `update_state_after_alloc` records the
  load (once per request: vLLM clears `do_remote_prefill` there), and the plan of that step lists
  it in `kv_reqs_to_recv` (request id -> tokens to load). A request finished before its load was
  ever set up is listed with 0 tokens: only a notification, so the prefill side frees its blocks.
- prefill side (`do_remote_decode`): `request_finished` keeps the blocks of a request that stopped
  (length cap or stop token) for the decode side to read, and the next plan lists it in
  `kv_reqs_to_send` (request id -> tokens held); an aborted one frees its blocks at once.

`build_connector_meta` hands the step's lists to the plan and clears them, as vLLM's does.
"""

from __future__ import annotations

from ..request import Request, RequestStatus


class NixlConnectorScheduler:
    """Per-request transfer bookkeeping of the scheduler-side NIXL connector."""

    __slots__ = ("kv_role", "_reqs_need_recv", "_reqs_need_send", "_remote_prefill_processed")

    def __init__(self, kv_role: str) -> None:
        self.kv_role = kv_role
        # request id -> tokens to load (the next plan's kv_reqs_to_recv)
        self._reqs_need_recv: dict[str, int] = {}
        # request id -> tokens held for the remote decode (the next plan's kv_reqs_to_send)
        self._reqs_need_send: dict[str, int] = {}
        # vLLM sets params["do_remote_prefill"] = False after the first allocation
        self._remote_prefill_processed: set[str] = set()

    def _wants_remote_prefill(self, request: Request) -> bool:
        """do_remote_prefill, still unprocessed (one KV transfer per request)."""
        params = request.kv_transfer_params
        return (
            params is not None
            and params.do_remote_prefill
            and request.request_id not in self._remote_prefill_processed
        )

    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int) -> tuple[int, bool]:
        """(tokens to load beyond the local hit, whether the load is asynchronous): the whole
        prompt past `num_computed_tokens` for an unprocessed remote prefill, else nothing."""
        if self._wants_remote_prefill(request):
            count = request.num_prompt_tokens - num_computed_tokens
            if count > 0:
                return count, True
        return 0, False

    def update_state_after_alloc(self, request: Request, num_external_tokens: int) -> None:
        """Blocks are allocated: record the load of `num_external_tokens` (decode side)."""
        if self._wants_remote_prefill(request):
            if num_external_tokens > 0:
                self._reqs_need_recv[request.request_id] = num_external_tokens
            self._remote_prefill_processed.add(request.request_id)

    def request_finished(self, request: Request, num_held_tokens: int) -> bool:
        """The request finished: True if its blocks must stay allocated until the remote decode
        has read them (delay_free_blocks); `num_held_tokens` is 0 when it holds no computed KV."""
        params = request.kv_transfer_params
        rid = request.request_id
        if params is None:
            return False
        if params.do_remote_prefill:
            if rid not in self._remote_prefill_processed:
                self._reqs_need_recv[rid] = 0  # never loaded: notify the prefill side to free
            self._remote_prefill_processed.discard(rid)
            return False
        if request.status not in (RequestStatus.FINISHED_LENGTH_CAPPED, RequestStatus.FINISHED_STOPPED):
            return False  # aborted (or failed) prefill: its blocks are freed now
        if num_held_tokens <= 0:
            return False
        self._reqs_need_send[rid] = num_held_tokens
        return True

    def build_connector_meta(self) -> tuple[dict[str, int], dict[str, int]]:
        """(reqs_to_recv, reqs_to_send) of the step being planned; the lists start over."""
        recv, send = self._reqs_need_recv, self._reqs_need_send
        self._reqs_need_recv = {}
        self._reqs_need_send = {}
        return recv, send

    def has_pending_meta(self) -> bool:
        """Loads or sends recorded but not yet handed to a plan."""
        return bool(self._reqs_need_recv) or bool(self._reqs_need_send)
