"""Synthetic Workloads: a seeded mix of request classes, some of them multi-turn sessions.

Each arrival event picks a class by weight. A single-turn class emits one request; a session
class starts a session whose turn k (k >= 1) arrives a think time after turn k-1 and whose
prompt is the class's shared system prompt, then every earlier user message and reply, then the
new user message, so later turns extend earlier prompts exactly (prefix sharing). Open loop:
think times run from the previous arrival, since replies' durations are the simulator's business.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .arrivals import ArrivalSpec, arrival_times
from .errors import TraceError
from .lengths import LengthSpec, length_spec
from .sessions import build_requests
from .validate import normalize, validate_workload


@dataclass
class ClassSpec:
    """One request class: lengths, optional sessions and shared system prompts, and flags."""

    name: str = "default"
    weight: float = 1.0
    prompt: LengthSpec = field(default_factory=lambda: LengthSpec("lognormal", mean=512, cv=1.0))
    output: LengthSpec = field(default_factory=lambda: LengthSpec("lognormal", mean=128, cv=1.0))
    turns: LengthSpec | None = None          # None: single-turn requests
    think_time_s: float = 0.0                # mean (exponential) gap between a session's turns
    system_prompt_tokens: int = 0            # shared prefix, one of `system_prompts` variants
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
            raise TraceError("think_time_s and system_prompt_tokens must be >= 0, system_prompts "
                             ">= 1", field=f"{self.name}.system_prompts")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise TraceError(f"max_tokens must be >= 1, got {self.max_tokens}",
                             field=f"{self.name}.max_tokens")

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
    block_size: int = 16                     # granularity of the generated prompt block hashes

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


def generate_workload(spec: WorkloadSpec) -> pd.DataFrame:
    """Draw the workload; grows the number of arrival events until the request target is met."""
    mean_turns = np.average([c.turns.sample(256, np.random.default_rng(0)).mean() if c.turns
                             else 1.0 for c in spec.classes], weights=[c.weight for c in spec.classes])
    events = None if spec.num_requests is None else int(spec.num_requests / mean_turns) + 16
    while True:
        rng = np.random.default_rng(spec.seed)
        t = arrival_times(spec.arrival, rng, n=events, duration=spec.duration_s)
        df = build_requests(spec, t, rng)
        if spec.duration_s is not None:
            df = df[df["arrival_time"] < spec.duration_s]
            break
        n = spec.num_requests
        if len(df) >= n and df["arrival_time"].iloc[n - 1] <= t[-1]:  # type: ignore[index]
            df = df.head(n)
            break
        events = int(events * 1.5) + 16  # type: ignore[operator]
    df = df.reset_index(drop=True)
    df["arrival_time"] -= df["arrival_time"].iloc[0] if len(df) else 0.0
    df.attrs = {"source": f"generate(seed={spec.seed})", "generator": _describe(spec)}
    if "prompt_block_hashes" in df.columns:
        df.attrs["prefix_block_size"] = spec.block_size
    return validate_workload(normalize(df))


def _describe(spec: WorkloadSpec) -> str:
    """A compact provenance string (attrs must stay plain data)."""
    a = spec.arrival
    return (f"{a.process}(rate={a.rate:g}, cv={a.cv:g}) x "
            + ", ".join(f"{c.name}:{c.weight:g}" for c in spec.classes))
