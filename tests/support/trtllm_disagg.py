"""Driving one side of a TensorRT-LLM prefill/decode pair by hand: requests, steps and transfer ends."""

from __future__ import annotations

from schedsim.policies import KVTransferParams, Request, RequestOutput, StepPlan, StepResult, make_policy
from schedsim.policies.trtllm import TrtllmPolicy

TOKEN = 7
FIRST = 11  # the token the context phase sampled, carried by the generation-only request


def policy(name: str = "trtllm:guaranteed-no-evict", **kw) -> TrtllmPolicy:
    """A small replica: 16-token blocks, 63 usable blocks unless `num_gpu_blocks` says otherwise."""
    opts: dict = dict(num_gpu_blocks=64, block_size=16, max_model_len=512, max_num_batched_tokens=256)
    opts.update(kw)
    made = make_policy(name, **opts)
    assert isinstance(made, TrtllmPolicy)
    return made


def context_only(rid: str, prompt: int, hashes: tuple[int, ...] | None = None) -> Request:
    """The prefill side's request: max_tokens 1, KV held for the decode replica 1."""
    return Request(
        rid,
        0.0,
        prompt,
        1,
        prompt_block_hashes=hashes,
        kv_transfer_params=KVTransferParams(do_remote_decode=True),
    )


def generation_only(
    rid: str, prompt: int, max_tokens: int, hashes: tuple[int, ...] | None = None, first: bool = True
) -> Request:
    """The decode side's request: the prompt's KV comes from prefill replica 0; carries the first token."""
    params = KVTransferParams(do_remote_prefill=True, remote_engine_id=0)
    req = Request(rid, 0.0, prompt, max_tokens, prompt_block_hashes=hashes, kv_transfer_params=params)
    if first:
        req.output_token_ids = [FIRST]
    return req


def colocated(rid: str, prompt: int, max_tokens: int, hashes: tuple[int, ...] | None = None) -> Request:
    """A request served by this replica alone."""
    return Request(rid, 0.0, prompt, max_tokens, prompt_block_hashes=hashes, ignore_eos=True)


def step(
    p: TrtllmPolicy,
    recv: set[str] | None = None,
    sent: set[str] | None = None,
    failed: set[str] | None = None,
) -> tuple[StepPlan, list[RequestOutput]]:
    """schedule(), then a result sampling one token for every sampling request, plus transfer ends."""
    plan = p.schedule()
    sampled: dict[str, list[int]] = {}
    for rid, n in plan.num_scheduled_tokens.items():
        req = p.requests[rid]
        last = not req.is_context_init_state or req.context_current_position + n >= req.prompt_len
        sampled[rid] = [TOKEN] if last else []
    result = StepResult(
        step_id=plan.step_id,
        sampled_token_ids=sampled,
        finished_recving=set() if recv is None else recv,
        finished_sending=set() if sent is None else sent,
        failed_kv_load_ids=set() if failed is None else failed,
    )
    outputs = p.update_from_output(plan, result)
    p.check_invariants()
    return plan, outputs


def state(p: TrtllmPolicy) -> dict[str, str]:
    """Each active request's state name."""
    return {r.request_id: r.state.name for r in p.active}
