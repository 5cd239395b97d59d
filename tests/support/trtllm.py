"""Builders for LlmRequests in a given scheduling state (scenario tests pin exact outcomes on them)."""

from __future__ import annotations

from schedsim.policies import Request, RequestStatus
from schedsim.policies.trtllm import LlmRequest, LlmRequestState


def ctx(
    rid: str,
    prompt: int,
    pos: int = 0,
    reusable: int = 0,
    max_new: int = 16,
    lora: int | None = None,
    drafts: int = 0,
    beam: int = 1,
    hashes: tuple[int, ...] | None = None,
) -> LlmRequest:
    """A context request with its cursor at `pos` (pos > 0: mid-chunk, i.e. started)."""
    request = Request(rid, 0.0, prompt, max_new, lora_id=lora, beam_width=beam, prompt_block_hashes=hashes)
    req = LlmRequest.from_request(request, max_new)
    req.context_current_position = pos
    request.num_computed_tokens = pos
    req.context_chunk_size = prompt - pos
    req.estimated_reusable_tokens = reusable
    req.draft_tokens = [5] * drafts
    if pos:
        request.status = RequestStatus.RUNNING
        req.has_run = True
    return req


def gen(
    rid: str,
    prompt: int = 16,
    generated: int = 1,
    max_new: int = 16,
    beam: int = 1,
    drafts: int = 0,
    lora: int | None = None,
) -> LlmRequest:
    """A generation request with `generated` tokens sampled (the last one's KV not computed yet)."""
    request = Request(rid, 0.0, prompt, max_new, lora_id=lora, beam_width=beam)
    request.output_token_ids = [7] * generated
    request.num_computed_tokens = prompt + generated - 1
    request.status = RequestStatus.RUNNING
    req = LlmRequest.from_request(request, max_new)
    req.state = LlmRequestState.GENERATION_IN_PROGRESS
    req.context_current_position = prompt
    req.context_chunk_size = 0
    req.draft_tokens = [5] * drafts
    req.has_run = True
    return req


def ids(reqs: list[LlmRequest]) -> list[str]:
    """Request ids in order."""
    return [r.request_id for r in reqs]


def make_kv(usable_blocks: int, block_size: int = 16, caching: bool = True):
    """A block manager with exactly `usable_blocks` allocatable blocks (plus the null block)."""
    from schedsim.policies.kv_cache import KVCacheManager

    return KVCacheManager(usable_blocks + 1, block_size, 4096, enable_caching=caching)


def hold(kv, req: LlmRequest, tokens: int | None = None) -> LlmRequest:
    """Give the request blocks for `tokens` (default: its computed tokens), as if it had run."""
    request = req.request
    computed = request.num_computed_tokens
    n = computed if tokens is None else tokens
    request.num_computed_tokens = 0
    assert kv.allocate_slots(request, n) is not None, "pool too small for the scenario"
    request.num_computed_tokens = computed
    return req
