"""GPU checks (marked `gpu`, skipped without CUDA): compiled Triton kernels at real shapes, the model
on the Triton path, and the CUDA executor (streams, pinned D2H, on-device placeholder fill)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from backend_helpers import make_batch, max_err  # noqa: E402
from schedsim.backend import ExecutorConfig, RealExecutor  # noqa: E402
from schedsim.backend.kernels import get_ops  # noqa: E402
from schedsim.backend.kernels import reference as ref  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.mark.parametrize(
    "dtype,dim,tol", [(torch.float16, 128, 4e-3), (torch.bfloat16, 64, 3e-2), (torch.float32, 64, 1e-4)]
)
def test_compiled_paged_attention_at_real_shapes(dtype, dim, tol):
    seqs = [(0, 300), (1000, 64), (517, 1), (2047, 1), (0, 1), (33, 17)]
    seqs += [(200 + 37 * i, 1) for i in range(40)]
    meta = make_batch(seqs, page=16, num_blocks=1200, seed=3)
    g = torch.Generator().manual_seed(0)
    kc = torch.randn(1200, 16, 8, dim, generator=g).to(dtype)
    vc = torch.randn(1200, 16, 8, dim, generator=g).to(dtype)
    q = torch.randn(int(meta.query_start_loc[-1]), 32, dim, generator=g).to(dtype)
    want = ref.paged_attention_ref(q.cuda(), kc.cuda(), vc.cuda(), meta, dim**-0.5)
    got = get_ops("triton").paged_attention(q.cuda(), kc.cuda(), vc.cuda(), meta.to("cuda"), dim**-0.5)
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


def test_cuda_executor_async_steps_match_dense_greedy():
    """Two steps in flight on CUDA: the second feeds on the first's sampled tokens on the device."""
    from schedsim.policies import Request, StepPlan

    ex = RealExecutor.from_config(
        ExecutorConfig(
            model="mini", block_size=16, num_blocks=64, device="cuda", dtype="float32", ops="triton", seed=4
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
    for h in inflight:
        for r, toks in ex.collect(h).sampled_token_ids.items():
            outputs[r] += toks
    assert ex.num_fill_slices >= 1
    for r, p in prompts.items():
        assert outputs[r] == ex.model.greedy_reference(p, 4)
