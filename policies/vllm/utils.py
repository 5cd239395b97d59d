"""vLLM's `check_stop` (vllm/v1/core/sched/utils.py): the stop rule applied to each appended token."""

from __future__ import annotations

from ..request import Request, RequestStatus


def stop_status(request: Request, max_model_len: int) -> RequestStatus | None:
    """The finished status the last appended token gives: EOS, stop tokens, then length caps."""
    last = request.output_token_ids[-1]
    eos, stops = request.eos_token_id, request.stop_token_ids
    if eos is not None and last == eos and not request.ignore_eos:
        return RequestStatus.FINISHED_STOPPED
    if stops and last in stops:
        return RequestStatus.FINISHED_STOPPED
    if request.num_tokens >= max_model_len or len(request.output_token_ids) >= request.max_tokens:
        return RequestStatus.FINISHED_LENGTH_CAPPED
    return None


def check_stop(request: Request, max_model_len: int) -> bool:
    """vLLM's check_stop on the last appended token: sets the finished status (and the stop
    token as stop_reason) and returns True when the request stops."""
    status = stop_status(request, max_model_len)
    if status is None:
        return False
    last = request.output_token_ids[-1]
    if status == RequestStatus.FINISHED_STOPPED and (request.ignore_eos or last != request.eos_token_id):
        request.stop_reason = last
    request.status = status
    return True
