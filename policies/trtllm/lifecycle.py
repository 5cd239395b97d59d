"""Folding a step's result into a request: cursor advance, recompute counting, tokens, stop checks."""

from __future__ import annotations

from ..request import Request, RequestStatus
from .state import LlmRequest, LlmRequestState


def count_recomputed(req: LlmRequest, start: int, num_tokens: int) -> int:
    """Tokens of [start, start + num_tokens) that already had KV before the last pause."""
    return max(0, min(start + num_tokens, req.recompute_watermark) - start)


def advance_context(req: LlmRequest, chunk: int) -> bool:
    """Move past a computed chunk; returns True when the prompt is done (state -> generation)."""
    start = req.context_current_position
    req.request.num_recomputed_tokens += count_recomputed(req, start, chunk)
    req.context_chunk_size = chunk
    req.move_to_next_context_chunk()
    req.request.num_computed_tokens = req.context_current_position
    if req.context_current_position >= req.prompt_len:
        req.state = LlmRequestState.GENERATION_IN_PROGRESS
        return True
    return False


def stop_reason(request: Request, token: int) -> RequestStatus | None:
    """EOS (unless ignored) or a stop token ends the request as stopped."""
    eos, stops = request.eos_token_id, request.stop_token_ids
    if (eos is not None and token == eos and not request.ignore_eos) or (stops and token in stops):
        request.stop_reason = token
        return RequestStatus.FINISHED_STOPPED
    return None


def finish_after(req: LlmRequest, token: int, max_model_len: int) -> RequestStatus | None:
    """The finish `token`, just appended, brings: a stop (EOS, stop token), else the output cap or
    max_model_len."""
    request = req.request
    status = stop_reason(request, token)
    if status is None and (
        req.max_num_generated_tokens >= req.max_new_tokens or request.num_tokens >= max_model_len
    ):
        status = RequestStatus.FINISHED_LENGTH_CAPPED
    return status


def append_tokens(
    req: LlmRequest, tokens: list[int], max_model_len: int
) -> tuple[list[int], RequestStatus | None]:
    """Append sampled tokens until a stop condition; returns the newly delivered ones and the finish.

    Positions a pause truncated were already streamed to the client: regenerating them is recompute,
    not new output, so only positions past the delivered high-water mark are returned (the sampled
    list itself when all of it is new).
    """
    request = req.request
    outs = request.output_token_ids
    start = len(outs)
    status: RequestStatus | None = None
    n = 0
    for tok in tokens:
        outs.append(tok)
        n += 1
        status = finish_after(req, tok, max_model_len)
        if status is not None:
            break
    skip = min(max(req.num_delivered - start, 0), n)  # appended positions streamed before a pause
    req.num_delivered += n - skip
    return (tokens if skip == 0 and n == len(tokens) else tokens[skip:n]), status
