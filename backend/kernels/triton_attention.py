"""Paged attention for mixed batches in one Triton kernel: prefill chunks over cached context and
decodes, grouped-query heads, online softmax over KV tiles gathered through the block table.

One program serves one KV head of one sequence: its tile rows are (token, query head of the group)
pairs, so every K/V tile is loaded once for the whole group and a decode fills `group` rows of the
tile instead of one (vLLM's unified attention packs GQA the same way)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .metadata import AttentionMetadata, check_block_tables


@triton.jit
def _online_softmax_tile(q, k, v, q_pos, k_pos, k_ok, m_i, l_i, acc, scale, IEEE: tl.constexpr):
    """Fold one KV tile into the running max, sum and output (causal mask by position)."""
    if IEEE:
        s = tl.dot(q, tl.trans(k), input_precision="ieee")
    else:
        s = tl.dot(q, tl.trans(k))
    s = tl.where((k_pos[None, :] <= q_pos[:, None]) & k_ok[None, :], s * scale, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.exp(m_i - m_new)
    p = tl.exp(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    if IEEE:
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
    else:
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return m_new, l_i, acc


@triton.jit
def _paged_attention_kernel(
    Q,
    K_cache,
    V_cache,
    Out,
    block_tables,
    query_start_loc,
    seq_lens,
    scale,
    stride_qt,
    stride_qh,
    stride_ot,
    stride_oh,
    stride_kb,
    stride_ks,
    stride_kh,
    stride_bt,
    QUERIES_PER_KV: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    UPCAST: tl.constexpr,
    IEEE: tl.constexpr,
):
    """One program: BLOCK_M (token, query head) rows of one sequence and one KV head."""
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    tile = tl.program_id(2)
    q_start = tl.load(query_start_loc + seq)
    q_len = tl.load(query_start_loc + seq + 1) - q_start
    if tile * BLOCK_M < q_len * QUERIES_PER_KV:
        seq_len = tl.load(seq_lens + seq)
        context = seq_len - q_len
        offs_r = tile * BLOCK_M + tl.arange(0, BLOCK_M)
        tok = offs_r // QUERIES_PER_KV
        head = kv_head * QUERIES_PER_KV + offs_r % QUERIES_PER_KV
        offs_d = tl.arange(0, BLOCK_D)
        m_ok = tok < q_len
        d_ok = offs_d < HEAD_DIM
        q_off = (q_start + tok)[:, None] * stride_qt + head[:, None] * stride_qh + offs_d[None, :]
        q = tl.load(Q + q_off, mask=m_ok[:, None] & d_ok[None, :], other=0.0)
        if UPCAST:
            q = q.to(tl.float32)
        q_pos = context + tok
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        # Keys past the tile's last token are masked anyway: stop there (causal).
        last_tok = ((tile + 1) * BLOCK_M - 1) // QUERIES_PER_KV
        kv_end = tl.minimum(seq_len, context + last_tok + 1)
        for start in range(0, kv_end, BLOCK_N):
            k_pos = start + tl.arange(0, BLOCK_N)
            k_ok = k_pos < kv_end
            page = tl.load(block_tables + seq * stride_bt + k_pos // PAGE_SIZE, mask=k_ok, other=0)
            page = page.to(tl.int64)  # page * stride_kb overflows int32 in large caches
            kv_off = page * stride_kb + (k_pos % PAGE_SIZE) * stride_ks + kv_head * stride_kh
            kv_mask = k_ok[:, None] & d_ok[None, :]
            k = tl.load(K_cache + kv_off[:, None] + offs_d[None, :], mask=kv_mask, other=0.0)
            v = tl.load(V_cache + kv_off[:, None] + offs_d[None, :], mask=kv_mask, other=0.0)
            if UPCAST:
                k = k.to(tl.float32)
                v = v.to(tl.float32)
            m_i, l_i, acc = _online_softmax_tile(q, k, v, q_pos, k_pos, k_ok, m_i, l_i, acc, scale, IEEE)
        out = acc / l_i[:, None]
        o_off = (q_start + tok)[:, None] * stride_ot + head[:, None] * stride_oh + offs_d[None, :]
        tl.store(Out + o_off, out.to(Out.dtype.element_ty), mask=m_ok[:, None] & d_ok[None, :])


def _interpreting() -> bool:
    """True when kernels run in Triton's CPU interpreter (which multiplies bf16 wrongly in tl.dot)."""
    return triton.knobs.runtime.interpret if hasattr(triton, "knobs") else False


def paged_attention(
    q: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    validate: bool = True,
) -> torch.Tensor:
    """Triton paged attention over a mixed batch; q [T, Hq, D], caches [blocks, page, Hk, D]."""
    num_blocks, page, num_kv_heads, head_dim = key_cache.shape
    if value_cache.shape != key_cache.shape or value_cache.stride() != key_cache.stride():
        raise ValueError("paged_attention: key and value caches must share shape and strides")
    if q.shape[-1] != head_dim or q.shape[1] % num_kv_heads or key_cache.stride(-1) != 1:
        raise ValueError(f"paged_attention: q {tuple(q.shape)} does not fit cache {tuple(key_cache.shape)}")
    if validate:
        check_block_tables(meta.block_tables, meta.seq_lens, num_blocks, page)
    q = q if q.stride(-1) == 1 else q.contiguous()
    out = torch.empty_like(q)
    block_m = 16
    block_n = max(16, triton.next_power_of_2(page)) if page <= 64 else 64
    group = q.shape[1] // num_kv_heads
    grid = (meta.num_seqs, num_kv_heads, triton.cdiv(max(meta.max_query_len, 1) * group, block_m))
    upcast = q.dtype == torch.bfloat16 and _interpreting()
    _paged_attention_kernel[grid](
        q,
        key_cache,
        value_cache,
        out,
        meta.block_tables,
        meta.query_start_loc,
        meta.seq_lens,
        scale,
        q.stride(0),
        q.stride(1),
        out.stride(0),
        out.stride(1),
        key_cache.stride(0),
        key_cache.stride(1),
        key_cache.stride(2),
        meta.block_tables.stride(0),
        QUERIES_PER_KV=group,
        PAGE_SIZE=page,
        HEAD_DIM=head_dim,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_D=max(16, triton.next_power_of_2(head_dim)),
        UPCAST=upcast,
        IEEE=q.dtype == torch.float32,
    )
    return out
