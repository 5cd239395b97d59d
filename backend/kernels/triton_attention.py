"""Paged attention for mixed batches: the launch plan (decode kernel with split KV for single-token
queries, prefill kernel over a flat q-block grid for longer ones) and the checked entry point.

Every integer that changes from step to step (sequence count, split count, block-table stride) is
a runtime argument Triton does not specialise on, so a run compiles each kernel once per dtype and
model shape, in warmup, never inside a timed step."""

from __future__ import annotations

import torch
import triton

from .attention_tuning import (
    LOG2E,
    AttentionTuning,
    block_d,
    decode_params,
    num_splits,
    prefill_params,
    sm_count,
)
from .launch import Launch, run_all
from .metadata import AttentionMetadata, check_block_tables, check_devices, metadata_tensors
from .triton_decode_attention import combine_splits_kernel, decode_attention_kernel
from .triton_prefill_attention import prefill_attention_kernel

DEFAULT_TUNING = AttentionTuning()


def interpreting() -> bool:
    """True when kernels run in Triton's CPU interpreter (which multiplies bf16 wrongly in tl.dot)."""
    return bool(triton.knobs.runtime.interpret) if hasattr(triton, "knobs") else False


def _flags(q: torch.Tensor) -> dict[str, bool]:
    """UPCAST (bf16 in the interpreter) and EXACT (fp32 inputs: 3xTF32 products, not one TF32)."""
    return {"UPCAST": q.dtype == torch.bfloat16 and interpreting(), "EXACT": q.dtype == torch.float32}


def _counted_decodes(meta: AttentionMetadata) -> int:
    """Single-token sequences: the host count, all of them when no query is longer, else unknown (-1)."""
    if meta.max_query_len <= 1:
        return meta.num_seqs
    return meta.num_decodes


def plan_decode(
    q: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    out: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    tuning: AttentionTuning,
    num_decodes: int,
) -> list[Launch]:
    """The decode launch, plus the combine launch when the KV is split."""
    _, page, kv_heads, head_dim = key_cache.shape
    heads, group, bd = q.shape[1], q.shape[1] // kv_heads, block_d(head_dim)
    params = decode_params(tuning, head_dim, group, q.dtype)
    splits = num_splits(
        tuning,
        num_decodes if num_decodes >= 0 else meta.num_seqs,
        kv_heads,
        meta.max_seq_len,
        sm_count(tuning, q.device),
    )
    rows = meta.num_seqs * heads * splits if splits > 1 else 1
    part_out = torch.empty(rows * bd, dtype=torch.float32, device=q.device)
    part_lse = torch.empty(rows, dtype=torch.float32, device=q.device)
    bt = meta.block_tables
    decode = Launch(
        decode_attention_kernel,
        (meta.num_seqs, kv_heads, splits),
        (
            q,
            key_cache,
            value_cache,
            out,
            part_out,
            part_lse,
            bt,
            meta.query_start_loc,
            meta.seq_lens,
            scale * LOG2E,
            splits,
            q.stride(0),
            q.stride(1),
            out.stride(0),
            out.stride(1),
            key_cache.stride(0),
            key_cache.stride(1),
            key_cache.stride(2),
            bt.stride(0),
        ),
        {
            "NUM_HEADS": heads,
            "QUERIES_PER_KV": group,
            "PAGE_SIZE": page,
            "HEAD_DIM": head_dim,
            "BLOCK_M": params["BLOCK_M"],
            "BLOCK_N": params["BLOCK_N"],
            "BLOCK_D": bd,
            **_flags(q),
            "num_warps": params["num_warps"],
            "num_stages": params["num_stages"],
        },
    )
    if splits == 1:
        return [decode]
    combine = Launch(
        combine_splits_kernel,
        (meta.num_seqs, heads),
        (out, part_out, part_lse, meta.query_start_loc, splits, out.stride(0), out.stride(1)),
        {
            "NUM_HEADS": heads,
            "HEAD_DIM": head_dim,
            "BLOCK_D": bd,
            "BLOCK_S": triton.next_power_of_2(tuning.max_splits),
            "num_warps": 4,
        },
    )
    return [decode, combine]


def plan_prefill(
    q: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    out: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    tuning: AttentionTuning,
) -> Launch:
    """The prefill launch over the flat q-block grid (num_tokens // BLOCK_Q + num_seqs programs)."""
    _, page, kv_heads, head_dim = key_cache.shape
    group = q.shape[1] // kv_heads
    params = prefill_params(tuning, head_dim, group, q.dtype)
    bt = meta.block_tables
    grid = (q.shape[0] // params["BLOCK_Q"] + meta.num_seqs, kv_heads)
    return Launch(
        prefill_attention_kernel,
        grid,
        (
            q,
            key_cache,
            value_cache,
            out,
            bt,
            meta.query_start_loc,
            meta.seq_lens,
            scale * LOG2E,
            meta.num_seqs,
            q.stride(0),
            q.stride(1),
            out.stride(0),
            out.stride(1),
            key_cache.stride(0),
            key_cache.stride(1),
            key_cache.stride(2),
            bt.stride(0),
        ),
        {
            "QUERIES_PER_KV": group,
            "PAGE_SIZE": page,
            "HEAD_DIM": head_dim,
            "BLOCK_M": params["BLOCK_M"],
            "BLOCK_Q": params["BLOCK_Q"],
            "BLOCK_N": params["BLOCK_N"],
            "BLOCK_D": block_d(head_dim),
            **_flags(q),
            "num_warps": params["num_warps"],
            "num_stages": params["num_stages"],
        },
    )


def plan_paged_attention(
    q: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    out: torch.Tensor,
    tuning: AttentionTuning = DEFAULT_TUNING,
) -> list[Launch]:
    """The launches that write attention for every query row of `meta` into `out` (nothing checked)."""
    num_decodes = _counted_decodes(meta)
    launches: list[Launch] = []
    if num_decodes != 0 and meta.num_seqs:
        launches += plan_decode(q, key_cache, value_cache, out, meta, scale, tuning, num_decodes)
    if meta.max_query_len > 1 and num_decodes != meta.num_seqs:
        launches.append(plan_prefill(q, key_cache, value_cache, out, meta, scale, tuning))
    return launches


def check_attention_inputs(
    q: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, meta: AttentionMetadata
) -> None:
    """Raise on shapes, strides or devices the kernels cannot take."""
    _, _, num_kv_heads, head_dim = key_cache.shape
    if value_cache.shape != key_cache.shape or value_cache.stride() != key_cache.stride():
        raise ValueError("paged_attention: key and value caches must share shape and strides")
    if q.dim() != 3 or q.shape[-1] != head_dim or q.shape[1] % num_kv_heads or key_cache.stride(-1) != 1:
        raise ValueError(f"paged_attention: q {tuple(q.shape)} does not fit cache {tuple(key_cache.shape)}")
    if meta.block_tables.dim() != 2 or meta.block_tables.stride(-1) != 1:
        raise ValueError("paged_attention: block_tables must be 2-D with contiguous rows")
    check_devices(
        "paged_attention", q, key_cache=key_cache, value_cache=value_cache, **metadata_tensors(meta)
    )


def paged_attention(
    q: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    validate: bool = True,
    tuning: AttentionTuning = DEFAULT_TUNING,
) -> torch.Tensor:
    """Triton paged attention over a mixed batch; q [T, Hq, D], caches [blocks, page, Hk, D]."""
    check_attention_inputs(q, key_cache, value_cache, meta)
    if validate:
        check_block_tables(meta.block_tables, meta.seq_lens, key_cache.shape[0], key_cache.shape[1])
    q = q if q.stride(-1) == 1 else q.contiguous()
    out = torch.empty_like(q)
    if q.shape[0]:
        run_all(plan_paged_attention(q, key_cache, value_cache, meta, scale, out, tuning))
    return out
