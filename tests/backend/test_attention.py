"""The attention kernels' launch plan and numerics (interpreted on a CPU, compiled on a GPU): the flat
q-block grid, tiles independent of the page size, split-KV decode and the wide prefill blocks, at
fp32, fp16 and bf16 tolerances against the torch reference."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from schedsim.backend.kernels import reference as ref  # noqa: E402
from schedsim.backend.kernels import triton_status  # noqa: E402
from support.backend import attention_inputs, max_err  # noqa: E402

TRITON_OK, TRITON_WHY = triton_status()
pytestmark = pytest.mark.skipif(not TRITON_OK, reason=f"Triton kernels skipped: {TRITON_WHY}")
DEV = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}
# Prefills, chunks over context (one ending a key tile early: context 14), decodes.
MIXED = [(0, 5), (7, 3), (12, 1), (3, 40), (0, 1), (61, 2), (14, 20), (31, 9)]


def run(seqs, page, heads, kv_heads, dim, dtype, tuning=None, count_decodes=True):
    """Kernel output, reference output and the launch plan for one batch."""
    from schedsim.backend.kernels.triton_attention import (
        DEFAULT_TUNING,
        paged_attention,
        plan_paged_attention,
    )

    tuning = tuning or DEFAULT_TUNING
    q, kc, vc, meta = attention_inputs(seqs, page, heads, kv_heads, dim, dtype)
    if not count_decodes:
        meta.num_decodes = -1
    want = ref.paged_attention_ref(q, kc, vc, meta, dim**-0.5)
    q, kc, vc, meta = q.to(DEV), kc.to(DEV), vc.to(DEV), meta.to(DEV)
    got = paged_attention(q, kc, vc, meta, dim**-0.5, tuning=tuning).cpu()
    plan = plan_paged_attention(q, kc, vc, meta, dim**-0.5, torch.empty_like(q), tuning)
    return got, want, plan


def tuning(**kw):
    from schedsim.backend.kernels.attention_tuning import AttentionTuning

    return AttentionTuning(**kw)


@pytest.mark.parametrize(
    "dtype,dim,page,heads,kv_heads",
    [
        (torch.float32, 16, 4, 6, 2),  # group of 3: BLOCK_M is not a multiple of the group
        (torch.float16, 12, 16, 4, 1),  # multi-query, head_dim not a power of two
        (torch.bfloat16, 32, 3, 8, 2),  # a page size that is no power of two
        (torch.float16, 16, 1, 8, 8),  # one token per page: every key is its own page
        (torch.float32, 16, 32, 4, 1),
    ],
)  # pages larger than a key tile
def test_mixed_batch_matches_reference_whatever_the_page_size(dtype, dim, page, heads, kv_heads):
    got, want, plan = run(MIXED, page, heads, kv_heads, dim, dtype, tuning(prefill_block_n=16))
    assert got.dtype == dtype
    assert max_err(got, want) < TOL[dtype]
    assert [launch.name for launch in plan][-1] == "prefill_attention_kernel"
    assert any(launch.name == "decode_attention_kernel" for launch in plan)


def test_prefill_grid_is_flat_not_padded_to_the_longest_query():
    seqs = [(0, 200)] + [(40, 2)] * 30  # one long query among many short ones
    got, want, plan = run(seqs, 16, 4, 1, 16, torch.float16, tuning(prefill_block_m=64))
    assert max_err(got, want) < TOL[torch.float16]
    (prefill,) = plan
    block_q = prefill.kwargs["BLOCK_Q"]
    assert block_q == 16 and prefill.kwargs["BLOCK_M"] == 64  # 16 tokens x 4 heads of the group
    tokens = 200 + 30 * 2
    assert prefill.grid == (tokens // block_q + len(seqs), 1)
    padded = len(seqs) * -(-200 // block_q)  # num_seqs x blocks of the longest query
    assert prefill.grid[0] < padded / 4


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_split_kv_decode_combines_to_the_reference(dtype):
    seqs = [(700, 1), (35, 1), (0, 1)]  # a split count that leaves the short sequences' late splits empty
    got, want, plan = run(seqs, 16, 8, 2, 32, dtype, tuning(min_keys_per_split=64, decode_block_n=16))
    decode, combine = plan
    assert decode.grid[2] == 10 and decode.args[10] == 10  # 700 keys // 64 per split
    assert combine.name == "combine_splits_kernel" and combine.grid == (3, 8)
    assert max_err(got, want) < TOL[dtype]


def test_large_decode_batches_do_not_split():
    seqs = [(100 + i, 1) for i in range(40)]
    got, want, plan = run(seqs, 16, 4, 2, 16, torch.float16, tuning(num_sms=8))
    (decode,) = plan
    assert decode.grid == (40, 2, 1)
    assert max_err(got, want) < TOL[torch.float16]


def test_uncounted_decodes_run_both_kernels_with_the_same_result():
    got, want, plan = run(MIXED, 4, 4, 2, 16, torch.float16, count_decodes=False)
    counted, _, _ = run(MIXED, 4, 4, 2, 16, torch.float16)
    assert torch.equal(got, counted) and max_err(got, want) < TOL[torch.float16]
    assert plan[0].name == "decode_attention_kernel" and plan[-1].name == "prefill_attention_kernel"


def test_launch_parameters_for_wgmma_and_the_split_heuristic():
    from schedsim.backend.kernels.attention_tuning import (
        AttentionTuning,
        decode_params,
        num_splits,
        prefill_params,
    )

    t = AttentionTuning()
    for dtype in (torch.float16, torch.bfloat16):
        p = prefill_params(t, 128, 4, dtype)
        assert p["BLOCK_M"] >= 64 and p["num_warps"] % 4 == 0  # one or more warpgroups: wgmma-able
        assert p["BLOCK_Q"] * 4 == p["BLOCK_M"] and p["BLOCK_N"] == 64
    assert prefill_params(t, 32, 4, torch.float16)["BLOCK_N"] == 32  # small heads, narrower tiles
    assert prefill_params(t, 128, 32, torch.float16)["BLOCK_Q"] == 4
    assert prefill_params(t, 128, 8, torch.float32)["BLOCK_M"] == 32  # 3xTF32: fewer rows
    assert decode_params(t, 64, 8, torch.bfloat16)["BLOCK_M"] == 16
    assert decode_params(t, 64, 32, torch.bfloat16)["BLOCK_M"] == 32
    assert num_splits(t, 64, 8, 2048, 132) == 1  # 512 programs already fill two waves
    assert num_splits(t, 1, 8, 32768, 132) == 32  # 264 / 8 = 33, capped at max_splits
    assert num_splits(t, 2, 8, 600, 132) == 2  # never fewer than 256 keys a split
    with pytest.raises(ValueError, match="prefill_block_m"):
        AttentionTuning(prefill_block_m=48)


def test_real_shape_batch_gets_a_cache_that_holds_it():
    """The GPU tests' batch (46 sequences, contexts to 2k) needs 2,578 blocks of 16: building it on a
    smaller cache is a clear error, and on its own cache every page it reads is valid."""
    from schedsim.backend.kernels import check_block_tables
    from support.backend import REAL_SEQS, blocks_needed, make_batch

    assert blocks_needed(REAL_SEQS, 16) == 2578
    with pytest.raises(ValueError, match="needs 2578 blocks of 16"):
        make_batch(REAL_SEQS, page=16, num_blocks=1200)
    q, kc, vc, meta = attention_inputs(REAL_SEQS, 16, 8, 2, 16, torch.float16)
    check_block_tables(meta.block_tables, meta.seq_lens, kc.shape[0], 16)
    assert meta.num_decodes == 43 and meta.max_seq_len == 2048
