"""Property tests over random workloads, both vLLM policies, with spec decoding, aborts and
simulated (length-only) requests: bookkeeping invariants hold every step and runs are deterministic."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schedsim.policies import Request, StepResult, make_policy

pytestmark = pytest.mark.pure_python  # compiled and interpreted must agree

EOS = 2


def _workload(rng: random.Random, block_size: int) -> list[tuple[int, Request, int | None]]:
    """(arrival step, request, eos position) triples; half carry token ids, half only lengths."""
    out = []
    for i in range(rng.randint(1, 14)):
        n = rng.randint(1, 90)
        mt = rng.randint(1, 40)
        if rng.random() < 0.5:
            ids = [rng.choice([5, 6, 7])] * n
            req = Request(f"q{i}", float(i), n, mt, prompt_token_ids=ids, priority=rng.randint(0, 2))
        else:
            hashes = tuple(rng.choice([1, 2]) for _ in range(n // block_size)) if rng.random() < 0.7 else None
            req = Request(f"q{i}", float(i), n, mt, prompt_block_hashes=hashes, priority=rng.randint(0, 2))
        out.append((rng.choice([0, rng.randint(0, 30)]), req, rng.choice([None, rng.randint(1, mt)])))
    return out


def _result(policy, plan, rng: random.Random, eos_at: dict[str, int | None]) -> StepResult:
    """Sample for every non-chunk request; accept a random prefix of its drafts; fail a few KV loads."""
    sampled = {}
    for rid in plan.num_scheduled_tokens:
        req = policy.requests[rid]
        if req.is_prefill_chunk:
            sampled[rid] = []
            continue
        drafts = plan.spec_decode_tokens.get(rid, [])
        n = 1 + rng.randint(0, len(drafts))
        first = req.num_computed_tokens - req.prompt_len + 1 - len(drafts)
        sampled[rid] = [EOS if eos_at[rid] == first + j else 100 + j for j in range(n)]
    failed = {rid for rid in plan.num_scheduled_tokens if rng.random() < 0.03}
    return StepResult(step_id=plan.step_id, sampled_token_ids=sampled, failed_kv_load_ids=failed)


def _run(seed: int, name: str) -> tuple[list, dict]:
    """Replay one random workload; returns the step log and the final request states."""
    rng = random.Random(seed)
    bs = rng.choice([4, 16])
    mml = 160
    cfg = dict(
        block_size=bs,
        num_gpu_blocks=-(-mml // bs) + 1 + rng.choice([0, 2, 10, 100]),
        max_num_seqs=rng.choice([1, 3, 8]),
        max_num_batched_tokens=rng.choice([16, 64, 256]),
        max_model_len=mml,
        enable_prefix_caching=rng.random() < 0.8,
        long_prefill_token_threshold=rng.choice([0, 8]),
        num_spec_tokens=rng.choice([0, 0, 2]),
        scheduling_policy=rng.choice(["fcfs", "priority"]),
        defer_block_free=rng.random() < 0.3,
    )
    cfg["max_num_batched_tokens"] = max(cfg["max_num_batched_tokens"], cfg["max_num_seqs"])
    policy = make_policy(name, **cfg)
    work = _workload(rng, bs)
    eos_at = {r.request_id: e for _, r, e in work}
    aborts = {rng.randint(0, 60): r.request_id for _, r, _ in work if rng.random() < 0.15}
    queue, log = [], []
    for t in range(600):
        for arr, req, _ in work:
            if arr == t:
                policy.add_request(req)
        if t in aborts:
            policy.abort_requests([aborts[t]])
        plan = policy.schedule()
        queue.append((plan, _result(policy, plan, rng, eos_at)))
        outs = []
        if len(queue) >= policy.max_concurrent_batches:
            outs = policy.update_from_output(*queue.pop(0))
            if cfg["num_spec_tokens"] and policy.max_concurrent_batches == 1:
                policy.update_draft_token_ids(
                    {r.request_id: [7] * cfg["num_spec_tokens"] for r in policy.running}
                )
        policy.check_invariants()
        log.append(
            (
                dict(plan.num_scheduled_tokens),
                list(plan.preempted_req_ids),
                [(o.request_id, tuple(o.new_token_ids), o.finish_reason) for o in outs],
            )
        )
        if t > 31 and not policy.has_requests() and not any(p.num_scheduled_tokens for p, _ in queue):
            break
    states = {r.request_id: (r.status, tuple(r.output_token_ids), r.num_preemptions) for _, r, _ in work}
    return log, states


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), name=st.sampled_from(["vllm", "vllm-async"]))
def test_random_workloads_keep_invariants_and_finish(seed, name):
    log, states = _run(seed, name)
    for rid, (status, outs, _) in states.items():
        assert status.is_finished, f"{rid} never finished: {status!r}"
        assert len(outs) >= 0
    assert (log, states) == _run(seed, name)  # same input, identical log and outputs


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_sync_and_async_deliver_the_same_tokens_without_eos_or_aborts(seed):
    rng = random.Random(seed)
    counts = {}
    for name in ("vllm", "vllm-async"):
        policy = make_policy(
            name,
            block_size=16,
            num_gpu_blocks=60,
            max_num_seqs=4,
            max_num_batched_tokens=64,
            max_model_len=256,
        )
        reqs = [Request(f"r{i}", float(i), rng.randint(1, 60), rng.randint(1, 20)) for i in range(6)]
        rng.seed(seed)
        for r in reqs:
            policy.add_request(r)
        queue = []
        for _ in range(400):
            plan = policy.schedule()
            queue.append(
                (
                    plan,
                    StepResult(
                        sampled_token_ids={
                            rid: ([] if policy.requests[rid].is_prefill_chunk else [9])
                            for rid in plan.num_scheduled_tokens
                        }
                    ),
                )
            )
            if len(queue) >= policy.max_concurrent_batches:
                policy.update_from_output(*queue.pop(0))
            policy.check_invariants()
        counts[name] = [(r.status, len(r.output_token_ids)) for r in reqs]
    assert counts["vllm"] == counts["vllm-async"]
    assert all(n == r.max_tokens for (_, n), r in zip(counts["vllm"], reqs, strict=True))
