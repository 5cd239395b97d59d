"""Shared builders for backend tests: random paged batches."""

from __future__ import annotations

import torch
from schedsim.backend.kernels import AttentionMetadata


def make_batch(seqs: list[tuple[int, int]], page: int, num_blocks: int, seed: int = 0) -> AttentionMetadata:
    """Metadata for sequences given as (cached context, new tokens), on shuffled pages."""
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
    )


def max_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest absolute difference (torch.testing.assert_close imports torch.distributed: seconds)."""
    assert a.shape == b.shape, (a.shape, b.shape)
    return float((a.float() - b.float()).abs().max()) if a.numel() else 0.0
