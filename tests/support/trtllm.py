"""Builders for LlmRequests in a given scheduling state (scenario tests pin exact outcomes on them)."""

from __future__ import annotations

from schedsim.policies import Request, RequestStatus
from schedsim.policies.trtllm import BlockKeys, KvAccounting, KVCacheManager, LlmRequest, LlmRequestState


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
    req.draft_tokens = (5,) * drafts
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
    req.draft_tokens = (5,) * drafts
    req.has_run = True
    return req


def ids(reqs: list[LlmRequest]) -> list[str]:
    """Request ids in order."""
    return [r.request_id for r in reqs]


def make_acct(usable_blocks: int, block_size: int = 16, caching: bool = True) -> KvAccounting:
    """TensorRT-LLM's block manager with exactly `usable_blocks` blocks, and the accounting over it."""
    kv = KVCacheManager(usable_blocks, block_size, 4096, enable_block_reuse=caching)
    return KvAccounting(kv, BlockKeys(block_size))


def hold(acct: KvAccounting, req: LlmRequest, tokens: int | None = None, store: bool = False) -> LlmRequest:
    """Give the request its sequence, as if it had run: a context's whole prompt (addSequence), a
    generation's computed tokens; `store`: its full blocks are in the lookup tree (a completed prompt)."""
    request = req.request
    if tokens is None:
        tokens = req.prompt_len if req.is_context_init_state else request.num_computed_tokens
    keys = acct.keys.keys(request, tokens - 1)
    acct.kv.add_sequence(req.request_id, tokens, keys)
    if store:
        acct.kv.store_blocks(req.request_id, acct.keys.full_keys(request, tokens))
    return req
