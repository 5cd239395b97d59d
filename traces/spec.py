"""WorkloadSpec and ClassSpec: what a synthetic Workload depends on (the generator's input)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .arrivals import ArrivalSpec
from .errors import TraceError
from .lengths import LengthSpec, length_spec


@dataclass
class ClassSpec:
    """One request class: lengths, optional sessions and shared system prompts, and flags."""

    name: str = "default"
    weight: float = 1.0
    prompt: LengthSpec = field(default_factory=lambda: LengthSpec("lognormal", mean=512, cv=1.0))
    output: LengthSpec = field(default_factory=lambda: LengthSpec("lognormal", mean=128, cv=1.0))
    turns: LengthSpec | None = None  # None: single-turn requests
    think_time_s: float = 0.0  # mean (exponential) gap between a session's turns
    system_prompt_tokens: int = 0  # shared prefix, one of `system_prompts` variants
    system_prompts: int = 1
    structured_output: bool = False
    priority: int = 0
    lora_id: int | None = None
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        """Accept plain config values for lengths; name bad fields."""
        self.prompt = length_spec(self.prompt)
        self.output = length_spec(self.output)
        self.turns = None if self.turns is None else length_spec(self.turns)
        if not (np.isfinite(self.weight) and self.weight > 0):
            raise TraceError(f"weight must be > 0, got {self.weight}", field=f"{self.name}.weight")
        if self.think_time_s < 0 or self.system_prompt_tokens < 0 or self.system_prompts < 1:
            raise TraceError(
                "think_time_s and system_prompt_tokens must be >= 0, system_prompts >= 1",
                field=f"{self.name}.system_prompts",
            )
        if self.max_tokens is not None and self.max_tokens < 1:
            raise TraceError(
                f"max_tokens must be >= 1, got {self.max_tokens}", field=f"{self.name}.max_tokens"
            )

    @property
    def shares_prefixes(self) -> bool:
        """Only sharing classes pay for block hashes; other prompts are unique (None)."""
        return self.turns is not None or self.system_prompt_tokens > 0


@dataclass
class WorkloadSpec:
    """Everything a synthetic Workload depends on; the same spec and seed give the same rows."""

    arrival: ArrivalSpec = field(default_factory=ArrivalSpec)
    classes: list[ClassSpec] = field(default_factory=lambda: [ClassSpec()])
    num_requests: int | None = 1000
    duration_s: float | None = None
    seed: int = 0
    block_size: int = 16  # granularity of the generated prompt block hashes

    def __post_init__(self) -> None:
        """Exactly one size limit; classes from dicts."""
        if isinstance(self.arrival, dict):
            self.arrival = ArrivalSpec(**self.arrival)
        self.classes = [c if isinstance(c, ClassSpec) else ClassSpec(**c) for c in self.classes]
        if not self.classes:
            raise TraceError("need at least one request class", field="classes")
        names = [c.name for c in self.classes]
        if len(set(names)) != len(names):
            raise TraceError(f"class names must be unique: {names}", field="classes")
        if (self.num_requests is None) == (self.duration_s is None):
            raise TraceError("give exactly one of num_requests and duration_s", field="num_requests")
        if self.num_requests is not None and self.num_requests < 1:
            raise TraceError("num_requests must be >= 1", field="num_requests")
        if self.duration_s is not None and not self.duration_s > 0:
            raise TraceError("duration_s must be > 0", field="duration_s")
        if self.block_size < 1:
            raise TraceError("block_size must be >= 1", field="block_size")


def spec_from_dict(cfg: dict[str, Any]) -> WorkloadSpec:
    """A WorkloadSpec from a parsed JSON/TOML config, unknown keys named."""
    try:
        return WorkloadSpec(**cfg)
    except TypeError as exc:
        raise TraceError(f"bad generator config: {exc}", field="generate") from None
