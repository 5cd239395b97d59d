"""Validation: every registered policy driving the real backend yields exactly the dense, cache-free
greedy outputs, whatever the chunk size, prefix caching, batch-queue depth or preemptions."""

from __future__ import annotations

import random
from collections import deque

import pytest

torch = pytest.importorskip("torch")

from schedsim.backend import ExecutorConfig, RealExecutor, SamplingConfig  # noqa: E402
from schedsim.backend.kernels import triton_status  # noqa: E402
from schedsim.policies import Request, get_policy_info, list_policies  # noqa: E402

BS = 4


def workload(eos: dict[str, int] | None = None) -> list[Request]:
    """Five requests, three sharing a 9-token prefix (so prefix caching has real hits)."""
    rng = random.Random(0)
    shared = [rng.randrange(3, 500) for _ in range(9)]
    out = []
    for i in range(5):
        own = [rng.randrange(3, 500) for _ in range(rng.randrange(2, 12))]
        prompt = shared + own if i % 2 == 0 else own + own[:3]
        rid = f"r{i}"
        out.append(
            Request(
                rid,
                0.0,
                len(prompt),
                5 + i,
                prompt_token_ids=prompt,
                ignore_eos=eos is None,
                eos_token_id=(eos or {}).get(rid),
            )
        )
    return out


def run(
    policy: str, executor: RealExecutor, requests: list[Request], depth: int | None = None, **options
) -> tuple[dict[str, list[int]], dict[str, Request]]:
    """vLLM's step_with_batch_queue in miniature: keep `depth` steps in flight, FIFO."""
    info = get_policy_info(policy)
    chunked = options.pop("chunked", info.config_cls().enable_chunked_prefill)
    options.setdefault("max_num_batched_tokens", 16 if chunked else 64)
    pol = info.make(
        block_size=BS,
        num_gpu_blocks=executor.config.num_blocks,
        max_num_seqs=4,
        max_model_len=options.pop("max_model_len", 64),
        enable_chunked_prefill=chunked,
        **options,
    )
    live = {r.request_id: r for r in requests}
    for r in requests:
        pol.add_request(r)
    depth = depth or pol.max_concurrent_batches
    queue: deque = deque()
    outputs: dict[str, list[int]] = {}
    for _ in range(500):
        if not (pol.has_requests() or queue):
            return outputs, live
        if pol.has_requests() and len(queue) < depth:
            plan = pol.schedule()
            queue.append((plan, executor.launch(plan, live)))
            if plan.total_num_scheduled_tokens and len(queue) < depth:
                continue
        plan, handle = queue.popleft()
        for out in pol.update_from_output(plan, executor.collect(handle)):
            outputs.setdefault(out.request_id, []).extend(out.new_token_ids)
    raise AssertionError(f"{policy}: no progress after 500 steps")


@pytest.fixture(scope="module")
def shared():
    """One random model and its dense greedy outputs for the workload."""
    ex = RealExecutor.from_config(
        ExecutorConfig(model="tiny", block_size=BS, num_blocks=64, seed=1, dtype="fp32")
    )  # exact greedy equality: fp32 on CUDA too
    ref = {r.request_id: ex.model.greedy_reference(r.prompt_token_ids, r.max_tokens) for r in workload()}
    return ex, ref


def fresh(shared, num_blocks: int = 64, **kw) -> RealExecutor:
    """A new executor (empty KV cache) over the shared model."""
    model = shared[0].model
    cfg = ExecutorConfig(model="tiny", block_size=BS, num_blocks=num_blocks, seed=1, dtype="fp32", **kw)
    return RealExecutor(model, cfg)


@pytest.mark.parametrize(
    "policy,chunk,prefix",
    [
        ("vllm", 64, True),
        ("vllm", 5, False),
        ("vllm-async", 64, True),
        ("vllm-async", 7, True),
        ("vllm-async", 5, False),
    ],
)
def test_vllm_policies_match_dense_reference(shared, policy, chunk, prefix):
    outputs, _ = run(
        policy, fresh(shared), workload(), max_num_batched_tokens=chunk, enable_prefix_caching=prefix
    )
    assert outputs == shared[1]


@pytest.mark.parametrize(
    "policy,options,counter",
    [
        ("vllm", {}, "num_preemptions"),
        ("vllm-async", {}, "num_preemptions"),
        ("vllm-async", {"defer_block_free": True}, "num_preemptions"),
        ("trtllm:max-utilization", {}, "num_pauses"),
    ],
)
def test_forced_preemptions_and_pauses_recompute_the_same_tokens(shared, policy, options, counter):
    requests = workload()
    outputs, live = run(policy, fresh(shared, num_blocks=10), requests, max_model_len=32, **options)
    assert sum(getattr(r, counter) for r in live.values()) > 0  # the pool really was too small
    assert outputs == shared[1]


def test_every_other_registered_policy_runs_unchanged(shared):
    names = [p.name for p in list_policies() if p.name not in ("vllm", "vllm-async")]
    assert any(n.startswith("trtllm:") for n in names)
    for name in names:
        outputs, _ = run(name, fresh(shared), workload())
        assert outputs == shared[1], name


def test_worker_thread_and_eos_finishes(shared):
    """The CPU 'device' thread overlaps scheduling; EOS ends requests early and frees their state."""
    ex = fresh(shared, cpu_worker_thread=True)
    eos = {rid: toks[2] for rid, toks in shared[1].items()}
    outputs, _ = run("vllm-async", ex, workload(eos))
    ex.close()
    for rid, toks in shared[1].items():
        assert outputs[rid] == toks[: toks.index(eos[rid]) + 1]
    assert ex.states == {}  # finished requests were dropped


def test_seeded_sampling_is_identical_across_engines_and_chunking(shared):
    hot = SamplingConfig(temperature=0.8, top_p=0.9, seed=3)
    sync, _ = run("vllm", fresh(shared, sampling=hot), workload(), max_num_batched_tokens=64)
    chunked, _ = run("vllm-async", fresh(shared, sampling=hot), workload(), max_num_batched_tokens=5)
    assert sync == chunked
    assert sync != shared[1]  # it really sampled


@pytest.mark.skipif(not triton_status()[0], reason=f"Triton kernels skipped: {triton_status()[1]}")
@pytest.mark.skipif(torch.cuda.is_available(), reason="on CUDA the gpu tests run this on the device")
def test_triton_kernels_drive_an_async_chunked_run(shared):
    """The whole executor on the Triton kernels (interpreted on a CPU): tiny on purpose."""
    requests = [
        Request("x", 0.0, 6, 3, prompt_token_ids=[5, 6, 7, 8, 9, 10], ignore_eos=True),
        Request("y", 0.0, 9, 3, prompt_token_ids=[5, 6, 7, 8, 1, 2, 3, 4, 9], ignore_eos=True),
    ]
    model = shared[0].model
    want = {r.request_id: model.greedy_reference(r.prompt_token_ids, 3) for r in requests}
    outputs, _ = run("vllm-async", fresh(shared, ops="triton"), requests, max_num_batched_tokens=8)
    assert outputs == want
