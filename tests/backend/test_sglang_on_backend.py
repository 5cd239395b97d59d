"""sglang-overlap (and sarathi) on the real backend (torch CPU path): retraction, preemption and
the overlap loop's dropped in-flight outputs still yield exactly the dense greedy tokens."""

from __future__ import annotations

import random
from collections import deque

import pytest

torch = pytest.importorskip("torch")

from schedsim.backend import ExecutorConfig, RealExecutor  # noqa: E402
from schedsim.policies import Request, make_policy  # noqa: E402

BS = 4


def workload() -> list[Request]:
    """Four requests with long outputs for a tiny pool, two sharing a prefix."""
    rng = random.Random(5)
    shared = [rng.randrange(3, 500) for _ in range(8)]
    out = []
    for i in range(4):
        own = [rng.randrange(3, 500) for _ in range(rng.randrange(2, 8))]
        prompt = shared + own if i % 2 == 0 else own
        # no EOS id: the greedy run is its full length, and SGLang's admission applies its
        # new-token ratio (ignore_eos requests are always reserved in full)
        out.append(Request(f"r{i}", 0.0, len(prompt), 10 + i, prompt_token_ids=prompt, eos_token_id=None))
    return out


def drive(pol, executor: RealExecutor, requests: list[Request]) -> dict[str, list[int]]:
    """step_with_batch_queue at the policy's depth (SGLang's overlap loop at depth 2)."""
    live = {r.request_id: r for r in requests}
    for r in requests:
        pol.add_request(r)
    queue: deque = deque()
    outputs: dict[str, list[int]] = {}
    for _ in range(1000):
        if not (pol.has_requests() or queue):
            return outputs
        if pol.has_requests():
            plan = pol.schedule()
            queue.appendleft((plan, executor.launch(plan, live)))
            pol.check_invariants()
            if len(queue) < pol.max_concurrent_batches and (not plan.is_empty or pol.has_requests()):
                continue
        plan, handle = queue.pop()
        for out in pol.update_from_output(plan, executor.collect(handle)):
            outputs.setdefault(out.request_id, []).extend(out.new_token_ids)
        pol.check_invariants()
    raise AssertionError("no progress after 1000 steps")


@pytest.fixture(scope="module")
def model_and_reference():
    """One random tiny model and its dense greedy outputs."""
    ex = RealExecutor.from_config(ExecutorConfig(model="tiny", block_size=BS, num_blocks=64, seed=2))
    ref = {r.request_id: ex.model.greedy_reference(r.prompt_token_ids, r.max_tokens) for r in workload()}
    return ex.model, ref


@pytest.mark.parametrize(
    "name,options,blocks",
    [  # (blocks - 1) usable blocks of 4 tokens
        ("sglang-overlap", {"init_new_token_ratio": 0.05, "max_num_batched_tokens": 8}, 9),
        (
            "sglang-overlap",
            {"init_new_token_ratio": 0.05, "enable_mixed_chunk": True, "max_num_batched_tokens": 8},
            10,
        ),
        ("sarathi", {"max_num_batched_tokens": 8}, 9),
    ],
)
def test_kv_pressure_recomputes_the_same_tokens(model_and_reference, name, options, blocks):
    """sglang retracts (and r2 reads r0's 8 prompt tokens from the radix tree), sarathi
    preempts; the tokens are the dense greedy ones either way."""
    model, ref = model_and_reference
    executor = RealExecutor(model, ExecutorConfig(model="tiny", block_size=BS, num_blocks=blocks, seed=2))
    pol = make_policy(name, block_size=BS, num_gpu_blocks=blocks, max_num_seqs=4, max_model_len=32, **options)
    requests = workload()
    outputs = drive(pol, executor, requests)
    assert sum(r.num_preemptions for r in requests) > 0  # the pool really was too small
    assert outputs == ref
