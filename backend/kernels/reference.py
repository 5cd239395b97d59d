"""Torch references of every kernel: the CPU execution path and the oracle the Triton kernels match."""

from __future__ import annotations

import torch

from .metadata import AttentionMetadata


def rms_norm_ref(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm of (x + residual) in fp32; returns (normed, new residual) as vLLM's fused op does."""
    h = x.float() if residual is None else x.float() + residual.float()
    out = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    return out.to(x.dtype), h.to(x.dtype)


def rotary_cos_sin(head_dim: int, max_positions: int, theta: float) -> torch.Tensor:
    """[max_positions, head_dim] table: cos of each frequency, then sin (neox / HF Llama layout)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    freqs = torch.outer(torch.arange(max_positions, dtype=torch.float64), inv_freq)
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1).float()


def rotary_ref(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate q [T, Hq, D] and k [T, Hk, D] by their positions (rotate-half convention)."""
    half = q.shape[-1] // 2
    cs = cos_sin[positions.long()]
    cos, sin = cs[:, None, :half], cs[:, None, half:]

    def rot(x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.float()[..., :half], x.float()[..., half:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)

    return rot(q), rot(k)


def silu_and_mul_ref(x: torch.Tensor) -> torch.Tensor:
    """SwiGLU's gate: silu(x[:, :I]) * x[:, I:] for the merged gate/up projection."""
    inter = x.shape[-1] // 2
    g, u = x.float()[..., :inter], x.float()[..., inter:]
    return (torch.nn.functional.silu(g) * u).to(x.dtype)


def store_kv_ref(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Write each token's K/V [T, Hk, D] into its slot of the paged cache; slot -1 is skipped."""
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].long()
    kc = key_cache.view(-1, *key_cache.shape[2:])
    vc = value_cache.view(-1, *value_cache.shape[2:])
    kc[slots] = key[keep].to(kc.dtype)
    vc[slots] = value[keep].to(vc.dtype)


def gather_kv(cache: torch.Tensor, block_table: torch.Tensor, seq_len: int) -> torch.Tensor:
    """The first seq_len positions of one sequence's K or V, read page by page: [seq_len, Hk, D]."""
    block_size = cache.shape[1]
    num_pages = -(-seq_len // block_size)
    pages = cache[block_table[:num_pages].long()]
    return pages.reshape(-1, *cache.shape[2:])[:seq_len]


def _decode_attention(
    q: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    tables: torch.Tensor,
    lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Single-token queries [B, Hq, D], batched over the ragged keys of all sequences (no padding):
    the work is proportional to the sum of the context lengths, as a paged kernel's is."""
    block_size, kv_heads = key_cache.shape[1], key_cache.shape[2]
    group, dim = q.shape[1] // kv_heads, q.shape[-1]
    lens = lens.long()
    seq = torch.repeat_interleave(torch.arange(q.shape[0], device=q.device), lens)  # [S]
    pos = torch.arange(seq.shape[0], device=q.device) - (torch.cumsum(lens, 0) - lens)[seq]
    slots = tables.long()[seq, pos // block_size] * block_size + pos % block_size
    k = key_cache.view(-1, kv_heads, dim)[slots].float()  # [S, Hk, D]
    v = value_cache.view(-1, kv_heads, dim)[slots].float()
    qg = q.float().view(q.shape[0], kv_heads, group, dim)
    scores = torch.einsum("skgd,skd->skg", qg[seq], k) * scale  # [S, Hk, G]
    top = torch.full((q.shape[0], kv_heads, group), float("-inf"), device=q.device)
    top = top.scatter_reduce(0, seq[:, None, None].expand_as(scores), scores, "amax")
    weights = (scores - top[seq]).exp()
    norm = torch.zeros_like(top).index_add_(0, seq, weights)
    out = torch.zeros(q.shape[0], kv_heads, group, dim, device=q.device)
    out.index_add_(0, seq, weights[..., None] * v[:, :, None, :])
    return (out / norm[..., None]).reshape(q.shape).to(q.dtype)


def paged_attention_ref(
    q: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, meta: AttentionMetadata, scale: float
) -> torch.Tensor:
    """Causal GQA attention of each sequence's new tokens over its whole paged KV: [T, Hq, D].

    Decodes (one new token) run as one batched gather; prefill chunks one sequence at a time.
    """
    out = torch.empty_like(q)
    qsl = meta.query_start_loc.tolist()
    lens = meta.seq_lens.tolist()
    group = q.shape[1] // key_cache.shape[2]
    decodes = [i for i in range(len(lens)) if qsl[i + 1] - qsl[i] == 1]
    if decodes:
        idx = torch.tensor(decodes, device=q.device)
        rows = meta.query_start_loc.to(q.device)[idx].long()
        out[rows] = _decode_attention(
            q[rows],
            key_cache,
            value_cache,
            meta.block_tables.to(q.device)[idx],
            meta.seq_lens.to(q.device)[idx],
            scale,
        )
    for i, seq_len in enumerate(lens):
        start, end = qsl[i], qsl[i + 1]
        if end - start <= 1:
            continue
        k = gather_kv(key_cache, meta.block_tables[i], seq_len).float().repeat_interleave(group, 1)
        v = gather_kv(value_cache, meta.block_tables[i], seq_len).float().repeat_interleave(group, 1)
        qi = q[start:end].float()
        scores = torch.einsum("thd,shd->hts", qi, k) * scale
        q_pos = torch.arange(seq_len - (end - start), seq_len, device=q.device)
        mask = torch.arange(seq_len, device=q.device)[None, :] > q_pos[:, None]
        scores.masked_fill_(mask[None], float("-inf"))
        out[start:end] = torch.einsum("hts,shd->thd", scores.softmax(-1), v).to(q.dtype)
    return out
