"""Decode attention: single-token queries over their whole paged context, with the KV split.

Program (seq, kv_head, split) reads one contiguous range of the sequence's keys for the group's
query heads. With one split it writes the output directly; with more (small batches, where
num_seqs x kv_heads programs would leave most of the GPU idle) it writes each split's normalised
partial output and log-sum-exp, and a second kernel combines them. The split count is a runtime
argument, so changing it never compiles a new variant."""

from __future__ import annotations

import triton
import triton.language as tl

from .triton_attention_tiles import load_kv_tile, scores, softmax_update


@triton.jit(do_not_specialize=["num_splits", "stride_bt"])
def decode_attention_kernel(
    Q,
    K_cache,
    V_cache,
    Out,
    Part_out,
    Part_lse,
    block_tables,
    query_start_loc,
    seq_lens,
    qk_scale,
    num_splits,
    stride_qt,
    stride_qh,
    stride_ot,
    stride_oh,
    stride_kb,
    stride_ks,
    stride_kh,
    stride_bt,
    NUM_HEADS: tl.constexpr,
    QUERIES_PER_KV: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    UPCAST: tl.constexpr,
    EXACT: tl.constexpr,
):
    """One program: the group's query heads of one decode token over one split of its keys."""
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    q_start = tl.load(query_start_loc + seq)
    q_len = tl.load(query_start_loc + seq + 1) - q_start
    if q_len == 1:  # longer queries run in the prefill kernel
        seq_len = tl.load(seq_lens + seq)
        per_split = tl.cdiv(tl.cdiv(seq_len, num_splits), BLOCK_N) * BLOCK_N
        lo = split * per_split
        num_keys = tl.maximum(tl.minimum(lo + per_split, seq_len) - lo, 0)
        offs_r = tl.arange(0, BLOCK_M)
        head = kv_head * QUERIES_PER_KV + offs_r
        r_ok = offs_r < QUERIES_PER_KV
        offs_d = tl.arange(0, BLOCK_D)
        d_ok = offs_d < HEAD_DIM
        q_off = q_start.to(tl.int64) * stride_qt + head[:, None] * stride_qh + offs_d[None, :]
        q = tl.load(Q + q_off, mask=r_ok[:, None] & d_ok[None, :], other=0.0)
        if UPCAST:
            q = q.to(tl.float32)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        table_row = block_tables + seq.to(tl.int64) * stride_bt
        offs_n = tl.arange(0, BLOCK_N)
        full_end = lo + num_keys // BLOCK_N * BLOCK_N
        for start in range(lo, full_end, BLOCK_N):
            k_pos = start + offs_n
            k, v = load_kv_tile(
                K_cache,
                V_cache,
                table_row,
                k_pos,
                k_pos < full_end,
                kv_head,
                offs_d,
                stride_kb,
                stride_ks,
                stride_kh,
                PAGE_SIZE,
                HEAD_DIM,
                BLOCK_D,
                False,
            )
            s = scores(q, k, qk_scale, UPCAST, EXACT)
            m_i, l_i, acc = softmax_update(s, v, m_i, l_i, acc, UPCAST, EXACT)
        end = lo + num_keys
        for start in range(full_end, end, BLOCK_N):  # at most one partial tile
            k_pos = start + offs_n
            k_ok = k_pos < end
            k, v = load_kv_tile(
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
                PAGE_SIZE,
                HEAD_DIM,
                BLOCK_D,
                True,
            )
            s = tl.where(k_ok[None, :], scores(q, k, qk_scale, UPCAST, EXACT), float("-inf"))
            m_i, l_i, acc = softmax_update(s, v, m_i, l_i, acc, UPCAST, EXACT)
        has_keys = l_i > 0  # a split past the sequence's end saw no key
        out = acc / tl.where(has_keys, l_i, 1.0)[:, None]
        if num_splits == 1:
            o_off = q_start.to(tl.int64) * stride_ot + head[:, None] * stride_oh + offs_d[None, :]
            tl.store(Out + o_off, out.to(Out.dtype.element_ty), mask=r_ok[:, None] & d_ok[None, :])
        else:
            part = (seq.to(tl.int64) * NUM_HEADS + head) * num_splits + split
            tl.store(Part_out + part[:, None] * BLOCK_D + offs_d[None, :], out, mask=r_ok[:, None])
            lse = tl.where(has_keys, m_i + tl.log2(tl.where(has_keys, l_i, 1.0)), float("-inf"))
            tl.store(Part_lse + part, lse, mask=r_ok)


@triton.jit(do_not_specialize=["num_splits"])
def combine_splits_kernel(
    Out,
    Part_out,
    Part_lse,
    query_start_loc,
    num_splits,
    stride_ot,
    stride_oh,
    NUM_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    """One program per (decode, query head): the splits' outputs weighted by their softmax mass."""
    seq = tl.program_id(0)
    head = tl.program_id(1)
    q_start = tl.load(query_start_loc + seq)
    if tl.load(query_start_loc + seq + 1) - q_start == 1:
        offs_s = tl.arange(0, BLOCK_S)
        s_ok = offs_s < num_splits
        first = (seq.to(tl.int64) * NUM_HEADS + head) * num_splits
        lse = tl.load(Part_lse + first + offs_s, mask=s_ok, other=float("-inf"))
        weight = tl.math.exp2(lse - tl.max(lse, 0))  # split 0 always holds keys: the max is finite
        offs_d = tl.arange(0, BLOCK_D)
        parts = tl.load(
            Part_out + (first + offs_s)[:, None] * BLOCK_D + offs_d[None, :], mask=s_ok[:, None], other=0.0
        )
        out = tl.sum(parts * weight[:, None], 0) / tl.sum(weight, 0)
        o_off = q_start.to(tl.int64) * stride_ot + head * stride_oh + offs_d
        tl.store(Out + o_off, out.to(Out.dtype.element_ty), mask=offs_d < HEAD_DIM)
