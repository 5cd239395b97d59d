"""The paged forward (any kernels, any dtype) against the dense fp32 forward of the same weights:
the end-to-end numerical check run on a CPU in the tests and on a GPU by bench/gpu_check.py."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .kernels import AttentionMetadata, Ops
from .kv_cache import PagedKVCache
from .model import LlamaModel

# Relative error of logits (max |paged - dense| / max |dense|) that bf16 and fp16 stay within over a
# few layers; fp32 stays near 1e-5.
TOLERANCE = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 3e-2}


@dataclass(frozen=True)
class ForwardCheck:
    """How far the paged logits are from the dense ones."""

    max_abs_err: float
    max_abs_logit: float
    argmax_agreement: float  # fraction of rows whose greedy token is the same

    @property
    def rel_err(self) -> float:
        """max_abs_err relative to the largest logit."""
        return self.max_abs_err / max(self.max_abs_logit, 1e-30)


def _chunk_meta(
    cache: PagedKVCache, table: list[int], start: int, end: int, device: torch.device
) -> AttentionMetadata:
    """Metadata of one chunk of one sequence (positions start..end-1) over its cached prefix."""
    n = end - start
    return AttentionMetadata(
        torch.tensor([0, n], dtype=torch.int32, device=device),
        torch.tensor([end], dtype=torch.int32, device=device),
        torch.tensor([table], dtype=torch.int32, device=device),
        torch.tensor(cache.slots(table, start, end), dtype=torch.int64, device=device),
        n,
        end,
        int(n == 1),
    )


@torch.inference_mode()
def check_paged_forward(
    model: LlamaModel, ops: Ops, tokens: torch.Tensor, chunks: list[int], block_size: int = 16
) -> ForwardCheck:
    """Feed `tokens` through the paged forward in chunks of the given sizes (prefill, chunks over
    cached context, single-token decodes) and compare every row's logits with the dense forward."""
    if sum(chunks) != tokens.numel() or min(chunks) < 1:
        raise ValueError(f"chunks {chunks} must be >= 1 and add up to {tokens.numel()} tokens")
    device = model.device
    pages = -(-tokens.numel() // block_size)
    cache = PagedKVCache(model.cfg, pages + 2, block_size, device, model.dtype)
    table = list(range(pages + 1, 1, -1))  # pages in reverse: the gather really follows the table
    tokens = tokens.to(device)
    got, start = [], 0
    for n in chunks:
        meta = _chunk_meta(cache, table, start, start + n, device)
        positions = torch.arange(start, start + n, device=device)
        got.append(model.compute_logits(model(tokens[start : start + n], positions, cache.layers, meta, ops)))
        start += n
    paged, dense = torch.cat(got).float(), model.dense_logits(tokens).float()
    agree = (paged.argmax(-1) == dense.argmax(-1)).float().mean()
    return ForwardCheck(float((paged - dense).abs().max()), float(dense.abs().max()), float(agree))
