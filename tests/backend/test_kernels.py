"""Kernels: the torch references against plain math, and the Triton kernels (interpreted on a CPU)
against the references, plus the index checks that must fire before any launch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from schedsim.backend.kernels import check_block_tables, check_slot_mapping, get_ops, triton_status  # noqa: E402
from schedsim.backend.kernels import reference as ref  # noqa: E402
from support.backend import make_batch, max_err  # noqa: E402

TRITON_OK, TRITON_WHY = triton_status()
# Triton kernels run on CUDA tensors where a GPU exists (compiled), else interpreted on CPU tensors.
DEV = "cuda" if torch.cuda.is_available() else "cpu"
needs_triton = pytest.mark.skipif(not TRITON_OK, reason=f"Triton kernels skipped: {TRITON_WHY}")


def _dense_attention(q, k, v, context):
    """Causal GQA attention over contiguous K/V [S, Hk, D] for queries at positions context..S-1."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = torch.einsum("thd,shd->hts", q, k) / q.shape[-1] ** 0.5
    allowed = torch.arange(k.shape[0])[None, :] <= (context + torch.arange(q.shape[0]))[:, None]
    return torch.einsum("hts,shd->thd", s.masked_fill(~allowed, float("-inf")).softmax(-1), v)


@settings(max_examples=20, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 20), st.integers(1, 9)), min_size=1, max_size=4),
    st.sampled_from([1, 3, 4]),
    st.integers(0, 10_000),
)
def test_reference_paged_attention_equals_dense_attention(seqs, page, seed):
    """Property: reading K/V page by page through a shuffled block table changes nothing."""
    heads, kv_heads, dim, num_blocks = 4, 2, 8, 128
    meta = make_batch(seqs, page, num_blocks, seed)
    g = torch.Generator().manual_seed(seed)
    kc = torch.randn(num_blocks, page, kv_heads, dim, generator=g)
    vc = torch.randn(num_blocks, page, kv_heads, dim, generator=g)
    q = torch.randn(int(meta.query_start_loc[-1]), heads, dim, generator=g)
    out = ref.paged_attention_ref(q, kc, vc, meta, dim**-0.5)
    for i, (ctx, n) in enumerate(seqs):
        a, b = int(meta.query_start_loc[i]), int(meta.query_start_loc[i + 1])
        k = ref.gather_kv(kc, meta.block_tables[i], ctx + n)
        v = ref.gather_kv(vc, meta.block_tables[i], ctx + n)
        assert max_err(out[a:b], _dense_attention(q[a:b], k, v, ctx)) < 1e-5


def test_reference_store_then_gather_round_trips():
    meta = make_batch([(0, 6), (5, 2)], page=4, num_blocks=12)
    kc, vc = torch.zeros(12, 4, 2, 3), torch.zeros(12, 4, 2, 3)
    key, value = torch.randn(8, 2, 3), torch.randn(8, 2, 3)
    ref.store_kv_ref(key, value, kc, vc, meta.slot_mapping)
    assert torch.equal(ref.gather_kv(kc, meta.block_tables[0], 6), key[:6])
    assert torch.equal(ref.gather_kv(vc, meta.block_tables[1], 7)[5:], value[6:])
    assert float(kc[0].abs().sum()) == 0.0  # the null block is never written


def test_index_checks_refuse_bad_tables_and_slots():
    meta = make_batch([(3, 2)], page=4, num_blocks=8)
    check_block_tables(meta.block_tables, meta.seq_lens, 8, 4)
    with pytest.raises(ValueError, match=r"outside 1\.\.7"):
        check_block_tables(torch.tensor([[1, 8]], dtype=torch.int32), meta.seq_lens, 8, 4)
    with pytest.raises(ValueError, match="needs 2 blocks, table has 1"):
        check_block_tables(torch.tensor([[1]], dtype=torch.int32), meta.seq_lens, 8, 4)
    with pytest.raises(ValueError, match="null block"):
        check_block_tables(torch.tensor([[0, 2]], dtype=torch.int32), meta.seq_lens, 8, 4)
    check_slot_mapping(torch.tensor([4, -1, 31]), 8, 4)
    with pytest.raises(ValueError, match="slot_mapping"):
        check_slot_mapping(torch.tensor([4, 32]), 8, 4)
    with pytest.raises(ValueError, match="slot_mapping"):
        check_slot_mapping(torch.tensor([2]), 8, 4)  # inside the null block


@needs_triton
@pytest.mark.parametrize(
    "dtype,dim,page,heads,kv_heads,tol",
    [
        (torch.float32, 16, 4, 6, 2, 1e-5),  # group of 3: tiles mix heads of several tokens
        (torch.float16, 12, 16, 4, 1, 3e-3),  # multi-query, head_dim not a power of 2
        (torch.bfloat16, 16, 4, 2, 2, 3e-2),
    ],
)  # plain multi-head
def test_triton_paged_attention_mixed_batch(dtype, dim, page, heads, kv_heads, tol):
    """Prefill from scratch, a chunk over cached context, decodes and a >16-token chunk in one launch."""
    ops = get_ops("triton")
    meta = make_batch([(0, 5), (7, 3), (12, 1), (3, 18), (0, 1)], page=page, num_blocks=24)
    meta_dev = meta.to(DEV)
    g = torch.Generator().manual_seed(1)
    kc = torch.randn(24, page, kv_heads, dim, generator=g).to(dtype)
    vc = torch.randn(24, page, kv_heads, dim, generator=g).to(dtype)
    q = torch.randn(int(meta.query_start_loc[-1]), heads, dim, generator=g).to(dtype)
    out = ops.paged_attention(q.to(DEV), kc.to(DEV), vc.to(DEV), meta_dev, dim**-0.5).cpu()
    assert out.dtype == dtype
    assert max_err(out, ref.paged_attention_ref(q, kc, vc, meta, dim**-0.5)) < tol


@needs_triton
def test_triton_attention_refuses_bad_block_table_before_launch():
    meta = make_batch([(2, 2)], page=4, num_blocks=8)
    meta.block_tables[0, 0] = 99  # would read far outside the cache
    kc = torch.zeros(8, 4, 2, 16)
    with pytest.raises(ValueError, match="outside"):
        get_ops("triton").paged_attention(torch.zeros(2, 4, 16), kc, kc.clone(), meta, 0.25)


@needs_triton
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 2e-3)])
def test_triton_pointwise_kernels_match_references(dtype, tol):
    ops = get_ops("triton")
    g = torch.Generator().manual_seed(2)
    x, res, w = (
        torch.randn(7, 48, generator=g).to(dtype),
        torch.randn(7, 48, generator=g).to(dtype),
        torch.randn(48, generator=g).to(dtype),
    )
    got = ops.rms_norm(x.to(DEV), w.to(DEV), 1e-5, res.to(DEV))
    for got_t, want in zip(got, ref.rms_norm_ref(x, w, 1e-5, res), strict=True):
        assert max_err(got_t.cpu(), want) < tol * 10
    plain = ops.rms_norm(x.to(DEV), w.to(DEV), 1e-5)[0].cpu()
    assert max_err(plain, ref.rms_norm_ref(x, w, 1e-5)[0]) < tol * 10
    gu = torch.randn(5, 80, generator=g).to(dtype)
    assert max_err(ops.silu_and_mul(gu.to(DEV)).cpu(), ref.silu_and_mul_ref(gu)) < tol
    cos_sin = ref.rotary_cos_sin(12, 64, 10000.0)
    pos = torch.tensor([0, 3, 9, 63, 17])
    q, k = torch.randn(5, 4, 12, generator=g).to(dtype), torch.randn(5, 2, 12, generator=g).to(dtype)
    want_q, want_k = ref.rotary_ref(pos, q, k, cos_sin)
    got_q, got_k = ops.rotary(pos.to(DEV), q.to(DEV), k.to(DEV), cos_sin.to(DEV))
    assert max_err(got_q.cpu(), want_q) < tol and max_err(got_k.cpu(), want_k) < tol


@needs_triton
def test_kernels_refuse_inputs_on_another_device_before_launch():
    """Host metadata handed to kernels whose data lives elsewhere fails clearly, before Triton sees it
    (on CUDA, a host pointer fails inside the launcher: "cannot be accessed from Triton")."""
    ops = get_ops("triton")
    meta = make_batch([(0, 3), (5, 1)], page=4, num_blocks=8)  # on the host
    q, kc = torch.zeros(4, 4, 16, device="meta"), torch.zeros(8, 4, 2, 16, device="meta")
    key = torch.zeros(4, 2, 16, device="meta")
    with pytest.raises(ValueError, match="paged_attention: query_start_loc is on cpu but the data is on me"):
        ops.paged_attention(q, kc, kc.clone(), meta, 0.25)
    with pytest.raises(ValueError, match="store_kv: slot_mapping is on cpu but the data is on meta"):
        ops.store_kv(key, key.clone(), kc, kc.clone(), meta.slot_mapping)
    with pytest.raises(ValueError, match="rotary: positions is on cpu"):
        ops.rotary(torch.arange(4), q, key, torch.zeros(64, 16, device="meta"))


@needs_triton
def test_triton_store_kv_by_slot_mapping():
    ops = get_ops("triton")
    meta = make_batch([(0, 5), (7, 3)], page=4, num_blocks=10)
    meta.slot_mapping[2] = -1  # a row that must not be stored
    key, value = torch.randn(8, 2, 8), torch.randn(8, 2, 8)
    caches = [torch.zeros(10, 4, 2, 8) for _ in range(4)]
    dev_caches = [c.to(DEV) for c in caches[:2]]
    ops.store_kv(key.to(DEV), value.to(DEV), dev_caches[0], dev_caches[1], meta.slot_mapping.to(DEV))
    caches[:2] = [c.cpu() for c in dev_caches]
    ref.store_kv_ref(key, value, caches[2], caches[3], meta.slot_mapping)
    assert torch.equal(caches[0], caches[2]) and torch.equal(caches[1], caches[3])
    assert int((caches[0] != 0).any(-1).any(-1).sum()) == 7  # 7 slots written, the -1 row skipped
    with pytest.raises(ValueError, match="slot_mapping"):
        ops.store_kv(key, value, caches[0], caches[1], meta.slot_mapping + 1000)
