"""Prefill attention: query chunks of two or more tokens over their cached context and themselves.

A flat grid of q-blocks (no padded num_seqs x max_query_len grid): program (b, kv_head) takes the
b-th block of BLOCK_Q tokens, found by a binary search over query_start_loc. Its BLOCK_M rows are
(token, query head) pairs of one KV head's group, so each K/V tile is loaded once for the whole
group; BLOCK_M >= 64 lets Triton use Hopper's wgmma. Keys every row sees run without masks; only
the diagonal tiles apply the causal mask."""

from __future__ import annotations

import triton
import triton.language as tl

from .triton_attention_tiles import find_seq, load_kv_tile, scores, softmax_update


@triton.jit(do_not_specialize=["num_seqs", "stride_bt"])
def prefill_attention_kernel(
    Q,
    K_cache,
    V_cache,
    Out,
    block_tables,
    query_start_loc,
    seq_lens,
    qk_scale,
    num_seqs,
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
    BLOCK_Q: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    UPCAST: tl.constexpr,
    EXACT: tl.constexpr,
):
    """One program: BLOCK_Q tokens x the group's query heads of one sequence and one KV head."""
    q_block = tl.program_id(0)
    kv_head = tl.program_id(1)
    seq = find_seq(query_start_loc, q_block, num_seqs, BLOCK_Q)
    q_start = tl.load(query_start_loc + seq)
    q_len = tl.load(query_start_loc + seq + 1) - q_start
    first = (q_block - (q_start // BLOCK_Q + seq)) * BLOCK_Q  # first token of this block in the sequence
    if (first < q_len) & (q_len > 1):  # single-token queries run in the decode kernel
        seq_len = tl.load(seq_lens + seq)
        context = seq_len - q_len
        offs_r = tl.arange(0, BLOCK_M)
        tok = first + offs_r // QUERIES_PER_KV
        head = kv_head * QUERIES_PER_KV + offs_r % QUERIES_PER_KV
        row_ok = (offs_r < BLOCK_Q * QUERIES_PER_KV) & (tok < q_len)
        offs_d = tl.arange(0, BLOCK_D)
        d_ok = offs_d < HEAD_DIM
        rows = (q_start + tok).to(tl.int64)
        q_off = rows[:, None] * stride_qt + head[:, None] * stride_qh + offs_d[None, :]
        q = tl.load(Q + q_off, mask=row_ok[:, None] & d_ok[None, :], other=0.0)
        if UPCAST:
            q = q.to(tl.float32)
        q_pos = context + tok
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        table_row = block_tables + seq.to(tl.int64) * stride_bt
        offs_n = tl.arange(0, BLOCK_N)
        # Keys up to the block's first token are seen by every row: whole tiles, no masks.
        kv_full = (context + first + 1) // BLOCK_N * BLOCK_N
        for start in range(0, kv_full, BLOCK_N):
            k_pos = start + offs_n
            k, v = load_kv_tile(
                K_cache,
                V_cache,
                table_row,
                k_pos,
                k_pos < kv_full,
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
        # The diagonal: keys up to the block's last token, causal mask per row.
        kv_end = tl.minimum(seq_len, context + first + BLOCK_Q)
        for start in range(kv_full, kv_end, BLOCK_N):
            k_pos = start + offs_n
            k_ok = k_pos < kv_end
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
            s = scores(q, k, qk_scale, UPCAST, EXACT)
            s = tl.where((k_pos[None, :] <= q_pos[:, None]) & k_ok[None, :], s, float("-inf"))
            m_i, l_i, acc = softmax_update(s, v, m_i, l_i, acc, UPCAST, EXACT)
        out = acc / l_i[:, None]
        o_off = rows[:, None] * stride_ot + head[:, None] * stride_oh + offs_d[None, :]
        tl.store(Out + o_off, out.to(Out.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])
