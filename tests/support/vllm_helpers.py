"""Small helpers for the vLLM policy tests: build policies and requests, fake a model step."""

from __future__ import annotations

from schedsim.policies import Request, StepPlan, StepResult, make_policy

EOS = 2


def make(name: str = "vllm", **cfg):
    """A policy with vLLM's unit-test harness defaults (10000 blocks, 16 seqs, 8192 tokens)."""
    opts = dict(
        block_size=16, num_gpu_blocks=10000, max_num_seqs=16, max_num_batched_tokens=8192, max_model_len=8192
    )
    opts.update(cfg)
    return make_policy(name, **opts)


def mkreq(
    rid: str,
    n: int,
    max_tokens: int = 16,
    tok: int | None = None,
    arrival: float = 0.0,
    priority: int = 0,
    **kw,
) -> Request:
    """A prompt of n copies of one token (vLLM's tests use [i] * n)."""
    t = tok if tok is not None else 1000 + sum(map(ord, rid))
    return Request(rid, arrival, n, max_tokens, prompt_token_ids=[t] * n, priority=priority, **kw)


def fake_result(
    policy, plan: StepPlan, token: int = 100, tokens: dict[str, list[int]] | None = None
) -> StepResult:
    """One sampled token per request that is not a prefill chunk (overrides in `tokens`)."""
    sampled: dict[str, list[int]] = {}
    for rid in plan.num_scheduled_tokens:
        if tokens and rid in tokens:
            sampled[rid] = list(tokens[rid])
            continue
        req = policy.requests.get(rid)
        sampled[rid] = [] if req is None or req.is_prefill_chunk else [token]
    return StepResult(step_id=plan.step_id, sampled_token_ids=sampled)


def step(policy, token: int = 100):
    """Synchronous step: schedule, then apply its fake result; returns (plan, outputs)."""
    plan = policy.schedule()
    outs = policy.update_from_output(plan, fake_result(policy, plan, token))
    policy.check_invariants()
    return plan, outs


class BatchQueue:
    """EngineCore.step_with_batch_queue emulation: update from the oldest step once the queue is full."""

    def __init__(self, policy, depth: int | None = None) -> None:
        self.policy = policy
        self.depth = depth or policy.max_concurrent_batches
        self.queue: list = []

    def step(self, token: int = 100, tokens: dict[str, list[int]] | None = None):
        """Schedule one step (its fake result is fixed now); returns (plan, outputs of the update)."""
        p = self.policy
        plan = p.schedule()
        self.queue.append((plan, fake_result(p, plan, token, tokens)))
        outs = []
        if len(self.queue) >= self.depth:
            outs = p.update_from_output(*self.queue.pop(0))
        p.check_invariants()
        return plan, outs
