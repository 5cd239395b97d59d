"""LlmRequest::pause: a paused request is rolled back to a longer prompt and recomputed, never swapped."""

from __future__ import annotations

from ..request import RequestStatus
from .state import LlmRequest, LlmRequestState


def pause(req: LlmRequest, max_input_len: int) -> int:
    """Fold generated tokens into the prompt (capped at max_input_len); returns the tokens lost.

    Beam width 1: the new prompt is min(max_input_len, prompt + generated); tokens past it are
    dropped from the request's output (they will be generated again) and max_new_tokens shrinks
    by what was folded. Beam width > 1: every beam rolls back to the original prompt, so all
    generated tokens are lost and max_new_tokens is unchanged. Either way the state returns to
    CONTEXT_INIT with the cursor, prepopulated length and reuse estimate reset, and the request's
    KV (freed by the caller) must be recomputed on re-admission.
    """
    if max_input_len < 1:
        raise ValueError(f"max_input_len must be >= 1, got {max_input_len}")
    request = req.request
    had_kv = request.num_computed_tokens
    generated = req.max_num_generated_tokens
    if req.beam_width > 1:
        lost = generated
        new_prompt_len = req.prompt_len
    else:
        new_prompt_len = min(max_input_len, req.prompt_len + generated)
        new_prompt_len = max(new_prompt_len, req.prompt_len)  # never shrinks the original prompt
        lost = req.prompt_len + generated - new_prompt_len
        req.max_new_tokens -= new_prompt_len - req.prompt_len
        req.prompt_len = new_prompt_len
    if lost:
        del request.output_token_ids[len(request.output_token_ids) - lost :]
    req.state = LlmRequestState.CONTEXT_INIT
    req.context_current_position = 0
    req.prepopulated_prompt_len = 0
    req.context_chunk_size = req.prompt_len
    req.estimated_reusable_tokens = 0
    req.draft_tokens = ()
    req.has_run = False
    req.recompute_watermark = max(req.recompute_watermark, min(had_kv, req.prompt_len))
    request.num_pauses += 1
    request.num_truncated_tokens += lost
    request.num_computed_tokens = 0
    request.spec_token_ids.clear()
    request.status = RequestStatus.PREEMPTED
    return lost
