"""Sampling on the device: greedy, or temperature + top-p with seeded per-position noise."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingConfig:
    """temperature 0 is greedy; otherwise nucleus sampling seeded by (seed, request, position)."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        """Reject values that have no meaning, naming the field."""
        if self.temperature < 0:
            raise ValueError(f"SamplingConfig.temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingConfig.top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        """No randomness at all."""
        return self.temperature == 0


def _row_seed(seed: int, request_id: str, position: int) -> int:
    """A stable 63-bit seed per sampled position, so batching, chunking, async mode and
    preemption-recompute never change which token a request draws."""
    return zlib.crc32(f"{seed}:{request_id}:{position}".encode()) * 2654435761 % (2**63)


def top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Zero the tail outside the smallest set of tokens whose mass reaches top_p (keeps >= 1)."""
    if top_p >= 1.0:
        return probs
    sorted_p, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_p.cumsum(-1) - sorted_p
    sorted_p = sorted_p.masked_fill(mass_before >= top_p, 0.0)
    return torch.zeros_like(probs).scatter_(-1, order, sorted_p)


def sample(
    logits: torch.Tensor, request_ids: list[str], positions: list[int], cfg: SamplingConfig
) -> torch.Tensor:
    """Token ids [N] (int64, on the logits' device) for N rows of fp32 logits; never syncs when greedy."""
    if logits.shape[0] != len(request_ids) or len(request_ids) != len(positions):
        raise ValueError(
            f"sample: {logits.shape[0]} logit rows, {len(request_ids)} request ids, "
            f"{len(positions)} positions"
        )
    if cfg.greedy or logits.shape[0] == 0:
        return logits.argmax(dim=-1)
    probs = top_p_filter(torch.softmax(logits.float() / cfg.temperature, dim=-1), cfg.top_p)
    noise = torch.empty_like(probs)
    for row, (rid, pos) in enumerate(zip(request_ids, positions, strict=True)):
        g = torch.Generator(device=logits.device).manual_seed(_row_seed(cfg.seed, rid, pos))
        noise[row].exponential_(generator=g)
    # Exponential race: argmax p / E with E ~ Exp(1) draws index i with probability p_i.
    return (probs / noise).argmax(dim=-1)
