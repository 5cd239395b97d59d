"""The latency-model interface: one step's shape in, seconds out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(slots=True)
class StepShape:
    """What one GPU step computes: prefill chunks and decodes, each with its context length."""

    # (new tokens, tokens already in the KV cache before this chunk) per prefill chunk
    prefills: list[tuple[int, int]] = field(default_factory=list)
    # (context length before the step, draft tokens verified) per decoding request
    decodes: list[tuple[int, int]] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        """Tokens fed through the model in this step."""
        return sum(n for n, _ in self.prefills) + sum(1 + k for _, k in self.decodes)


@runtime_checkable
class LatencyModel(Protocol):
    """Predicts GPU step time; roofline, table and fitted models all implement this."""

    name: str

    def step_time(self, shape: StepShape) -> float:
        """Seconds the GPU spends on one step of this shape."""

    def describe(self) -> dict:
        """What the model is and which calibration it uses (recorded in each run's config)."""
