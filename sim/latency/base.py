"""The latency-model interface: one step's shape in, seconds out."""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import itemgetter
from typing import Protocol, runtime_checkable

_first, _second = itemgetter(0), itemgetter(1)


def prefill_tokens(prefills: list[tuple[int, int]]) -> int:
    """New tokens of prefill chunks (C-level sum: the latency models call this every step)."""
    return sum(map(_first, prefills)) if prefills else 0


def context_sum(decodes: list[tuple[int, int]]) -> int:
    """The decodes' context lengths, summed (C-level, as `prefill_tokens`)."""
    return sum(map(_first, decodes)) if decodes else 0


@dataclass(slots=True)
class StepShape:
    """What one GPU step computes: prefill chunks and decodes, each with its context length."""

    # (new tokens, tokens already in the KV cache before this chunk) per prefill chunk
    prefills: list[tuple[int, int]] = field(default_factory=list)
    # (context length before the step, draft tokens verified) per decoding request
    decodes: list[tuple[int, int]] = field(default_factory=list)

    @property
    def num_drafts(self) -> int:
        """Draft tokens verified; a step without any is priced from the decodes' count and context
        sum alone (`plain_step_time`)."""
        return sum(map(_second, self.decodes)) if self.decodes else 0

    @property
    def decode_context(self) -> int:
        """The decodes' context lengths, summed."""
        return context_sum(self.decodes)

    @property
    def num_sampled(self) -> int:
        """Positions the LM head reads: one per chunk and decode, one more per draft."""
        return len(self.prefills) + len(self.decodes) + self.num_drafts

    @property
    def num_tokens(self) -> int:
        """Tokens fed through the model in this step."""
        return prefill_tokens(self.prefills) + len(self.decodes) + self.num_drafts


@runtime_checkable
class LatencyModel(Protocol):
    """Predicts GPU step time; roofline, table and fitted models all implement this."""

    name: str

    def step_time(self, shape: StepShape) -> float:
        """Seconds the GPU spends on one step of this shape."""

    def describe(self) -> dict:
        """What the model is and which calibration it uses (recorded in each run's config)."""
