"""Device helpers shared by the prefill and decode attention kernels: which sequence a flat q-block
belongs to, one K/V tile gathered through the block table, and one online-softmax update."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def find_seq(query_start_loc, q_block, num_seqs, BLOCK_Q: tl.constexpr):
    """The sequence owning flat q-block `q_block`; sequence i's blocks start at qsl[i] // BLOCK_Q + i,
    so the grid needs only num_tokens // BLOCK_Q + num_seqs programs (vLLM's unified attention)."""
    lo: tl.int32 = 0
    hi = num_seqs
    while lo < hi:
        mid = (lo + hi) // 2
        first_block = tl.load(query_start_loc + mid) // BLOCK_Q + mid
        if first_block <= q_block:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


@triton.jit
def load_kv_tile(
    K_cache,
    V_cache,
    table_row,
    k_pos,
    k_ok,
    kv_head,
    offs_d,
    stride_kb,
    stride_ks,
    stride_kh,
    PAGE_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    MASKED: tl.constexpr,
):
    """K transposed [BLOCK_D, BLOCK_N] and V [BLOCK_N, BLOCK_D] of keys k_pos; any page size works,
    a tile may span several pages or part of one. Unmasked tiles load without predicates."""
    if MASKED:
        page = tl.load(table_row + k_pos // PAGE_SIZE, mask=k_ok, other=0)
    else:
        page = tl.load(table_row + k_pos // PAGE_SIZE)
    # int64: page * stride_kb overflows int32 in caches over 2**31 elements
    kv_off = page.to(tl.int64) * stride_kb + (k_pos % PAGE_SIZE) * stride_ks + kv_head * stride_kh
    k_ptrs = K_cache + kv_off[None, :] + offs_d[:, None]
    v_ptrs = V_cache + kv_off[:, None] + offs_d[None, :]
    if MASKED or BLOCK_D != HEAD_DIM:
        d_ok = offs_d < HEAD_DIM
        k = tl.load(k_ptrs, mask=k_ok[None, :] & d_ok[:, None], other=0.0)
        v = tl.load(v_ptrs, mask=k_ok[:, None] & d_ok[None, :], other=0.0)
    else:
        k = tl.load(k_ptrs)
        v = tl.load(v_ptrs)
    return k, v


@triton.jit
def scores(q, k, qk_scale, UPCAST: tl.constexpr, EXACT: tl.constexpr):
    """q @ k scaled into the exp2 domain; fp32 inputs use three TF32 products (near-fp32 accuracy on
    tensor cores; a plain fp32 FMA dot holds a whole q row per thread and spills)."""
    if UPCAST:
        k = k.to(tl.float32)
    if EXACT:
        s = tl.dot(q, k, input_precision="tf32x3")
    else:
        s = tl.dot(q, k)
    return s * qk_scale


@triton.jit
def softmax_update(s, v, m_i, l_i, acc, UPCAST: tl.constexpr, EXACT: tl.constexpr):
    """Fold one tile's scores and values into the running max, sum and output."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.math.exp2(m_i - m_new)
    p = tl.math.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    if UPCAST:
        v = v.to(tl.float32)
    if EXACT:
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="tf32x3")
    else:
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return m_new, l_i, acc
