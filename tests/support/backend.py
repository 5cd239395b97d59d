"""Shared builders for backend tests: random paged batches, and the real-shape batch of the GPU tests."""

from __future__ import annotations

import torch
from schedsim.backend.kernels import AttentionMetadata

# The GPU tests' real-shape batch: prefill chunks over long contexts and 40 decodes up to 2k context.
REAL_SEQS = [(0, 300), (1000, 64), (517, 1), (2047, 1), (0, 1), (33, 17)]
REAL_SEQS += [(200 + 37 * i, 1) for i in range(40)]


def blocks_needed(seqs: list[tuple[int, int]], page: int) -> int:
    """Cache blocks a batch of (cached context, new tokens) sequences occupies, null block included."""
    return 1 + sum(-(-(ctx + n) // page) for ctx, n in seqs)


def make_batch(seqs: list[tuple[int, int]], page: int, num_blocks: int, seed: int = 0) -> AttentionMetadata:
    """Metadata for sequences given as (cached context, new tokens), on shuffled pages."""
    if blocks_needed(seqs, page) > num_blocks:
        raise ValueError(
            f"make_batch: the batch needs {blocks_needed(seqs, page)} blocks of {page} "
            f"(null block included), the cache has {num_blocks}"
        )
    g = torch.Generator().manual_seed(seed)
    free = (torch.randperm(num_blocks - 1, generator=g) + 1).tolist()
    tables, slots, qsl, lens = [], [], [0], []
    for ctx, n in seqs:
        seq_len = ctx + n
        need = -(-seq_len // page)
        table = [free.pop() for _ in range(need)]
        tables.append(table)
        slots += [table[p // page] * page + p % page for p in range(ctx, seq_len)]
        qsl.append(qsl[-1] + n)
        lens.append(seq_len)
    width = max(len(t) for t in tables)
    bt = torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32)
    return AttentionMetadata(
        torch.tensor(qsl, dtype=torch.int32),
        torch.tensor(lens, dtype=torch.int32),
        bt,
        torch.tensor(slots, dtype=torch.int64),
        max(n for _, n in seqs),
        max(lens),
        sum(n == 1 for _, n in seqs),
    )


def attention_inputs(
    seqs: list[tuple[int, int]],
    page: int,
    heads: int,
    kv_heads: int,
    dim: int,
    dtype: torch.dtype,
    seed: int = 0,
    spare_blocks: int = 3,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, AttentionMetadata]:
    """q, key cache, value cache and metadata for a batch, on a cache just large enough for it."""
    num_blocks = blocks_needed(seqs, page) + spare_blocks
    meta = make_batch(seqs, page, num_blocks, seed)
    g = torch.Generator().manual_seed(seed + 1)
    kc = torch.randn(num_blocks, page, kv_heads, dim, generator=g).to(dtype)
    vc = torch.randn(num_blocks, page, kv_heads, dim, generator=g).to(dtype)
    q = torch.randn(int(meta.query_start_loc[-1]), heads, dim, generator=g).to(dtype)
    return q, kc, vc, meta


def max_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest absolute difference (torch.testing.assert_close imports torch.distributed: seconds)."""
    assert a.shape == b.shape, (a.shape, b.shape)
    return float((a.float() - b.float()).abs().max()) if a.numel() else 0.0
