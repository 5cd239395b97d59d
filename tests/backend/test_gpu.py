"""GPU checks (marked `gpu`, skipped without CUDA): compiled Triton kernels at real shapes, the model
on the Triton path in bf16 at Llama-8B shapes, the CUDA executor (streams, pinned D2H, on-device
placeholder fill), its timing split and the absence of recompiles once warm."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from schedsim.backend import ExecutorConfig, ModelConfig, RealExecutor, build_model  # noqa: E402
from schedsim.backend.forward_check import TOLERANCE, check_paged_forward  # noqa: E402
from schedsim.backend.kernels import get_ops  # noqa: E402
from schedsim.backend.kernels import reference as ref  # noqa: E402
from support.backend import REAL_SEQS, attention_inputs, make_batch, max_err  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.mark.parametrize(
    "dtype,dim,tol",
    [
        (torch.float16, 128, 4e-3),
        (torch.bfloat16, 128, 3e-2),
        (torch.bfloat16, 64, 3e-2),
        (torch.float32, 64, 1e-4),
    ],
)
def test_compiled_paged_attention_at_real_shapes(dtype, dim, tol):
    q, kc, vc, meta = attention_inputs(REAL_SEQS, 16, 32, 8, dim, dtype, seed=3)
    q, kc, vc = q.cuda(), kc.cuda(), vc.cuda()
    want = ref.paged_attention_ref(q, kc, vc, meta, dim**-0.5)
    got = get_ops("triton").paged_attention(q, kc, vc, meta.to("cuda"), dim**-0.5)
    assert max_err(got, want) < tol


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 5e-2), (torch.bfloat16, 0.25)])
def test_compiled_pointwise_kernels(dtype, tol):
    ops, dev = get_ops("triton"), "cuda"
    x, res = (torch.randn(333, 2048, device=dev, dtype=dtype) for _ in range(2))
    w = torch.randn(2048, device=dev, dtype=dtype)
    for got, want in zip(ops.rms_norm(x, w, 1e-5, res), ref.rms_norm_ref(x, w, 1e-5, res), strict=True):
        assert max_err(got, want) < tol  # |values| reach ~10: a few ulps
    gu = torch.randn(333, 2 * 5632, device=dev, dtype=dtype)
    assert max_err(ops.silu_and_mul(gu), ref.silu_and_mul_ref(gu)) < tol
    cos_sin = ref.rotary_cos_sin(128, 8192, 500000.0).to(dev)
    pos = torch.randint(0, 8192, (333,), device=dev)
    q = torch.randn(333, 32, 128, device=dev, dtype=dtype)
    k = torch.randn(333, 8, 128, device=dev, dtype=dtype)
    want_q, want_k = ref.rotary_ref(pos, q, k, cos_sin)
    got_q, got_k = ops.rotary(pos, q.clone(), k.clone(), cos_sin)
    assert max_err(got_q, want_q) < tol and max_err(got_k, want_k) < tol
    meta = make_batch([(0, 100), (50, 1)], page=16, num_blocks=64).to(dev)
    kc, vc = (torch.zeros(64, 16, 8, 128, device=dev, dtype=dtype) for _ in range(2))
    kc2, vc2 = kc.clone(), vc.clone()
    key, val = (torch.randn(101, 8, 128, device=dev, dtype=dtype) for _ in range(2))
    ops.store_kv(key, val, kc, vc, meta.slot_mapping)
    ref.store_kv_ref(key, val, kc2, vc2, meta.slot_mapping)
    assert torch.equal(kc, kc2) and torch.equal(vc, vc2)


def test_bf16_llama_8b_layers_on_triton_match_the_dense_forward():
    cfg = ModelConfig.from_dict(
        dict(
            vocab_size=4096,
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=4,
            num_attention_heads=32,
            num_key_value_heads=8,
            rope_theta=500000.0,
            max_position_embeddings=2048,
        ),
        source="llama-8b x4",
    )
    model = build_model(cfg, seed=0, device="cuda", dtype=torch.bfloat16)
    tokens = torch.randint(0, 4096, (600,), generator=torch.Generator().manual_seed(0))
    check = check_paged_forward(model, get_ops("triton"), tokens, [300, 200, 97, 1, 1, 1])
    assert 0 < check.rel_err < TOLERANCE[torch.bfloat16]


def test_cuda_executor_async_steps_match_dense_greedy():
    """Two steps in flight on CUDA: the second feeds on the first's sampled tokens on the device."""
    from schedsim.policies import Request, StepPlan

    ex = RealExecutor.from_config(
        ExecutorConfig(
            model="mini", block_size=16, num_blocks=64, device="cuda", dtype="fp32", ops="triton", seed=4
        )
    )
    prompts = {"a": list(range(5, 40)), "b": list(range(100, 117))}
    reqs = {r: Request(r, 0.0, len(p), 4, prompt_token_ids=p) for r, p in prompts.items()}
    tables = {"a": [1, 2, 3], "b": [4, 5]}
    ctx = {r: 0 for r in prompts}
    sched = {r: len(p) for r, p in prompts.items()}
    outputs: dict[str, list[int]] = {r: [] for r in prompts}
    inflight = []
    for step in range(4):
        plan = StepPlan(
            step_id=step,
            num_scheduled_tokens=dict(sched),
            total_num_scheduled_tokens=sum(sched.values()),
            context_lens=dict(ctx),
            block_ids=tables,
            new_req_ids=list(prompts) if step == 0 else [],
        )
        inflight.append(ex.launch(plan, reqs))
        for r in prompts:
            ctx[r] += sched[r]
            sched[r] = 1
        if len(inflight) == 2:
            h = inflight.pop(0)
            for r, toks in ex.collect(h).sampled_token_ids.items():
                outputs[r] += toks
                reqs[r].output_token_ids += toks
            assert h.device_seconds > 0 and h.device_end >= h.device_start
            assert h.host_prepare_s > 0 and h.host_enqueue_s > 0
    for h in inflight:
        for r, toks in ex.collect(h).sampled_token_ids.items():
            outputs[r] += toks
    assert ex.num_fill_slices >= 1
    for r, p in prompts.items():
        assert outputs[r] == ex.model.greedy_reference(p, 4)


def test_cuda_defaults_to_bf16_and_device_time_excludes_packing(monkeypatch):
    from schedsim.backend.input_buffers import InputBuffers
    from schedsim.policies import Request, StepPlan

    ex = RealExecutor.from_config(ExecutorConfig(model="tiny", block_size=16, num_blocks=64, device="cuda"))
    assert ex.model.dtype == torch.bfloat16 and "bfloat16" in ex.describe()
    ex.warmup()
    original = InputBuffers.stage

    def slow_stage(self, batch):
        time.sleep(0.2)
        return original(self, batch)

    monkeypatch.setattr(InputBuffers, "stage", slow_stage)
    prompt = list(range(3, 40))
    req = Request("a", 0.0, len(prompt), 2, prompt_token_ids=prompt)
    plan = StepPlan(
        step_id=0,
        num_scheduled_tokens={"a": 37},
        total_num_scheduled_tokens=37,
        context_lens={"a": 0},
        block_ids={"a": [1, 2, 3]},
        new_req_ids=["a"],
    )
    handle = ex.launch(plan, {"a": req})
    ex.collect(handle)
    assert handle.host_prepare_s >= 0.2 > handle.device_seconds


def test_no_kernel_compiles_once_the_executor_is_warm():
    from schedsim.backend.kernels.specialization import compiled_variants
    from schedsim.policies import Request, StepPlan

    ex = RealExecutor.from_config(ExecutorConfig(model="tiny", block_size=16, num_blocks=512, device="cuda"))
    ex.warmup()
    before = compiled_variants()
    next_block = 1
    # (sequences, context, new tokens); one long decode splits its KV (the combine kernel runs)
    shapes = [(1, 0, 40), (3, 100, 1), (17, 300, 1), (5, 20, 9), (33, 1, 1), (1, 1000, 1)]
    for step, (num_seqs, ctx, n) in enumerate(shapes):
        plan, reqs = StepPlan(step_id=step), {}
        for i in range(num_seqs):
            rid, blocks = f"s{step}r{i}", -(-(ctx + n) // 16)
            reqs[rid] = Request(rid, 0.0, ctx + n, 1, prompt_token_ids=[7] * (ctx + n))
            plan.num_scheduled_tokens[rid], plan.context_lens[rid] = n, ctx
            plan.block_ids[rid] = list(range(next_block, next_block + blocks))
            plan.new_req_ids.append(rid)
            next_block = next_block + blocks if next_block + 2 * blocks < 512 else 1
        plan.total_num_scheduled_tokens = num_seqs * n
        ex.collect(ex.launch(plan, reqs))
        ex.states.clear()
    assert compiled_variants() == before
