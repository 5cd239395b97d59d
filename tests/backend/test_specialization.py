"""Recompiles inside timed steps: Triton specialises integer arguments equal to 1 or divisible by 16
and pointers by alignment, so anything that changes from step to step must not reach a kernel as a
specialised argument. These tests bind launches as the JIT would for sm_90 (no GPU, no compile)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from schedsim.backend import ExecutorConfig, RealExecutor  # noqa: E402
from schedsim.backend.input_batch import HostBatch  # noqa: E402
from schedsim.backend.kernels.specialization import bind  # noqa: E402
from schedsim.backend.kernels.triton_attention import plan_paged_attention  # noqa: E402
from support.backend import attention_inputs  # noqa: E402


def target():
    from triton.backends.compiler import GPUTarget

    return GPUTarget("cuda", 90, 32)


def keys_by_kernel(launch_lists) -> dict[str, set]:
    """Distinct JIT cache keys per kernel over many launches."""
    out: dict[str, set] = {}
    for launches in launch_lists:
        for launch in launches:
            out.setdefault(launch.name, set()).add(bind(launch, target()).key)
    return out


# Batches whose block-table widths (1, 3, 5, 32, 33 columns), sequence counts (1..17) and split counts
# all differ: one compiled variant per kernel must serve them all.
BATCHES = [
    [(0, 1)],
    [(70, 1)],
    [(0, 9), (40, 1), (3, 2)],
    [(250, 6)] + [(500, 1)] * 16,
    [(10, 1)] * 16,
    [(0, 520)],
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_attention_binds_one_variant_per_kernel_whatever_the_batch(dtype):
    from schedsim.backend.kernels.attention_tuning import AttentionTuning

    short_splits = AttentionTuning(min_keys_per_split=16)  # so these short contexts split too
    plans = []
    for seqs in BATCHES:
        q, kc, vc, meta = attention_inputs(seqs, 16, 8, 2, 64, dtype)
        plans.append(plan_paged_attention(q, kc, vc, meta, 0.125, torch.empty_like(q), short_splits))
    widths = {int(p.args[6].shape[1]) for plan in plans for p in plan if p.name == "decode_attention_kernel"}
    splits = {p.args[10] for plan in plans for p in plan if p.name == "decode_attention_kernel"}
    assert {1, 5, 32} <= widths and len(splits) >= 3 and 1 in splits  # the inputs really vary
    keys = keys_by_kernel(plans)
    assert set(keys) == {"decode_attention_kernel", "combine_splits_kernel", "prefill_attention_kernel"}
    assert {name: len(k) for name, k in keys.items()} == dict.fromkeys(keys, 1)


def test_a_specialised_stride_would_have_been_caught():
    """Control: the same check tells variants apart when an argument is specialised."""
    q, kc, vc, meta = attention_inputs([(0, 9), (40, 1)], 16, 8, 2, 64, torch.float16)
    (decode,) = [
        p
        for p in plan_paged_attention(q, kc, vc, meta, 0.125, torch.empty_like(q))
        if p.name == "decode_attention_kernel"
    ]
    other = list(decode.args)
    other[7] = 1  # q's token stride is specialised (it never changes in a run): 1 is a constant to Triton
    from schedsim.backend.kernels.launch import Launch

    assert (
        bind(decode, target()).key
        != bind(Launch(decode.kernel, decode.grid, tuple(other), decode.kwargs), target()).key
    )


def host_batch(seqs: list[tuple[int, int]], block_size: int) -> HostBatch:
    """A HostBatch of (context, new tokens) sequences on consecutive blocks."""
    batch, block = HostBatch(), 1
    for i, (ctx, n) in enumerate(seqs):
        need = -(-(ctx + n) // block_size)
        table = list(range(block, block + need))
        block += need
        batch.req_ids.append(f"r{i}")
        batch.input_ids += [5] * n
        batch.positions += range(ctx, ctx + n)
        batch.slot_mapping += [
            table[p // block_size] * block_size + p % block_size for p in range(ctx, ctx + n)
        ]
        batch.query_start_loc.append(len(batch.input_ids))
        batch.seq_lens.append(ctx + n)
        batch.block_tables.append(table)
        batch.sample_rows.append(len(batch.input_ids) - 1)
    return batch


def test_executor_inputs_keep_alignment_and_bind_one_variant_per_kernel():
    ex = RealExecutor.from_config(ExecutorConfig(model="tiny", block_size=4, num_blocks=400, device="cpu"))
    cfg = ex.model.cfg
    plans, pointers, allocations = [], [], []
    for seqs in 4 * (BATCHES[:4] + [[(3, 1)] * 5 + [(17, 3)]]):  # 3 slots: each sees every batch
        allocations.append(ex.buffers.num_allocations)
        inputs = ex.buffers.upload(ex.buffers.stage(host_batch(seqs, 4)))
        meta = inputs.meta
        pointers += [
            t.data_ptr()
            for t in (
                meta.query_start_loc,
                meta.seq_lens,
                meta.block_tables,
                meta.slot_mapping,
                inputs.positions,
            )
        ]
        q = torch.zeros(int(meta.slot_mapping.shape[0]), cfg.num_attention_heads, cfg.head_dim)
        k_cache, v_cache = ex.cache.layers[0]
        plans.append(plan_paged_attention(q, k_cache, v_cache, meta, 0.25, torch.empty_like(q)))
    assert all(p % 16 == 0 for p in pointers)
    keys = keys_by_kernel(plans)
    assert {name: len(k) for name, k in keys.items()} == dict.fromkeys(keys, 1)
    assert allocations[15] == ex.buffers.num_allocations > 0  # then the last round reuses every buffer


@pytest.mark.skipif(torch.cuda.is_available(), reason="on CUDA test_backend_gpu counts real compiles")
def test_warmup_launches_every_attention_kernel_a_run_can_need(monkeypatch):
    """A run's first long-context decode splits its KV: the combine kernel must already be compiled."""
    from schedsim.backend.kernels import triton_attention, triton_status

    if not triton_status()[0]:
        pytest.skip(triton_status()[1])
    launched = []
    real_run_all = triton_attention.run_all

    def record(launches):
        launched.extend(launch.name for launch in launches)
        real_run_all(launches)

    monkeypatch.setattr(triton_attention, "run_all", record)
    ex = RealExecutor.from_config(
        ExecutorConfig(model="tiny", block_size=16, num_blocks=8, device="cpu", ops="triton")
    )
    ex.warmup()
    assert {"prefill_attention_kernel", "decode_attention_kernel", "combine_splits_kernel"} <= set(launched)
    assert ex.ops.tuning.min_keys_per_split == 256  # restored after the warmup
