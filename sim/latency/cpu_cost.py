"""CPU-cost model: how long the engine's CPU phases take, so sync steps idle the GPU and async hides it.

Defaults (seconds = base + per_req x requests + per_token x tokens) are sized so that the four
phases together cost ~4 ms per step at 256 decoding requests, the order of magnitude public vLLM
measurements report:
- vLLM v0.6.0 blog (2024-09-05, "2.7x Throughput Improvement"): Llama 3 8B on one H100 spent 29%
  of the time in scheduling + input preparation + output gathering vs 38% on the GPU.
- vLLM RFC #6854 (multi-step scheduling): 5-13 ms of GPU bubble per decode step from CPU work,
  about 4 ms in the traces shown.
- vLLM RFC #6801 (performance roadmap): sampling, prepare-input, output processing and scheduling
  together ~20 ms per step at batch 200 (v0.5).
V1 cut these costs; we take the lower end. `calibrate_cpu_costs` replaces schedule and
update_from_output with timings of schedsim's own policy code measured in-process: the
simulator's CPU work, far below an engine's (its file says so in "measures").

With tensor parallelism the engine also broadcasts each step's scheduler output to the TP workers
before they prepare their inputs: `tp_broadcast`, charged inside prepare_inputs when tp > 1. Its
default (100 us, vLLM V1's shared-memory broadcast queue) is an estimate, not a measurement;
`schedsim calibrate --measurements` fits it (docs/latency.md).

`grammar_bitmask` is the engine thread filling a step's structured-output bitmask (vLLM's
`get_grammar_bitmask`) before the step may sample; its size is the bitmask's rows (one per
structured request, times 1 + num_spec_tokens). XGrammar (Dong et al., 2024, arXiv:2411.15100)
reports a few tens of microseconds to fill one token mask of a JSON grammar over a Llama-3
vocabulary; we take 40 µs a row and 10 µs per call. Only runs with structured requests have the
phase (a calibration file without it keeps this default).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

CPU_PHASES = ("schedule", "update_from_output", "prepare_inputs", "d2h_copy", "grammar_bitmask")
# phases every step has (a sync step's CPU time is their sum); grammar_bitmask only with grammars
STEP_PHASES = CPU_PHASES[:4]


@dataclass(frozen=True)
class PhaseCost:
    """One phase's linear cost: base + per_req x requests + per_token x tokens (seconds)."""

    base: float
    per_req: float = 0.0
    per_token: float = 0.0

    def __post_init__(self) -> None:
        for name in ("base", "per_req", "per_token"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or value < 0:
                raise ValueError(f"PhaseCost: field {name!r} must be a number >= 0, got {value!r}")


def _defaults() -> dict[str, PhaseCost]:
    return {
        "schedule": PhaseCost(base=50e-6, per_req=6e-6, per_token=0.0),
        "update_from_output": PhaseCost(base=20e-6, per_req=5e-6, per_token=0.0),
        "prepare_inputs": PhaseCost(base=80e-6, per_req=4e-6, per_token=0.02e-6),
        "d2h_copy": PhaseCost(base=15e-6, per_req=0.02e-6, per_token=0.0),
        "grammar_bitmask": PhaseCost(base=10e-6, per_req=0.0, per_token=40e-6),  # per_token: per row
    }


@dataclass(frozen=True)
class CpuCostConfig:
    """Per-phase costs and a global scale (scale 0 models a free CPU, 2 a slow one)."""

    phases: dict[str, PhaseCost] = field(default_factory=_defaults)
    scale: float = 1.0
    source: str = "defaults (vLLM public measurements, see module docstring)"
    # scheduler output to the TP workers, added to prepare_inputs when tp > 1
    tp_broadcast: PhaseCost = field(default_factory=lambda: PhaseCost(base=100e-6))

    def __post_init__(self) -> None:
        if not isinstance(self.scale, int | float) or self.scale < 0:
            raise ValueError(f"CpuCostConfig: field 'scale' must be >= 0, got {self.scale!r}")
        missing = [k for k in STEP_PHASES if k not in self.phases]
        unknown = [k for k in self.phases if k not in CPU_PHASES]
        if missing or unknown:
            raise ValueError(
                f"CpuCostConfig: field 'phases' must have {list(STEP_PHASES)} (and may "
                f"have grammar_bitmask); missing {missing}, unknown {unknown}"
            )
        for kind, cost in self.phases.items():
            if not isinstance(cost, PhaseCost):
                raise ValueError(f"CpuCostConfig: phases[{kind!r}] must be a PhaseCost")
        if not isinstance(self.tp_broadcast, PhaseCost):
            raise ValueError("CpuCostConfig: field 'tp_broadcast' must be a PhaseCost")

    @classmethod
    def from_dict(cls, raw: dict) -> CpuCostConfig:
        """Build from JSON/TOML: {"scale": s, "phases": {kind: {base, per_req, per_token}}}; an
        optional "measures" (what was timed) is kept in the source."""
        unknown = sorted(set(raw) - {"scale", "phases", "source", "kind", "tp_broadcast", "measures"})
        if unknown:
            raise ValueError(f"CpuCostConfig: unknown field(s) {unknown}")
        phases = _defaults()
        for kind, cost in raw.get("phases", {}).items():
            if kind not in CPU_PHASES:
                raise ValueError(f"CpuCostConfig: unknown phase {kind!r}; known {list(CPU_PHASES)}")
            phases[kind] = PhaseCost(**cost)
        extra = {"tp_broadcast": PhaseCost(**raw["tp_broadcast"])} if "tp_broadcast" in raw else {}
        source = str(raw.get("source", "user config"))
        if raw.get("measures"):  # what the numbers are the cost of (`calibrate --cpu`: schedsim's policies)
            source = f"{source}; measures: {raw['measures']}"
        return cls(phases=phases, scale=raw.get("scale", 1.0), source=source, **extra)


class CpuCostModel:
    """Seconds each CPU phase of the engine loop takes for a step of a given size."""

    def __init__(self, config: CpuCostConfig | None = None, scale: float | None = None, tp: int = 1) -> None:
        config = config or CpuCostConfig()
        if scale is not None:
            config = CpuCostConfig(
                phases=config.phases, scale=scale, source=config.source, tp_broadcast=config.tp_broadcast
            )
        if tp < 1:
            raise ValueError(f"CpuCostModel: tp must be >= 1, got {tp}")
        self.config, self.tp = config, tp
        s = config.scale
        phases = _defaults() | config.phases  # a config without grammar_bitmask keeps the default
        self._coef = {k: (c.base * s, c.per_req * s, c.per_token * s) for k, c in phases.items()}
        if tp > 1:  # the workers need the scheduler output before they prepare their inputs
            b = config.tp_broadcast
            base, per_req, per_token = self._coef["prepare_inputs"]
            self._coef["prepare_inputs"] = (
                base + b.base * s,
                per_req + b.per_req * s,
                per_token + b.per_token * s,
            )

    @property
    def scale(self) -> float:
        """The multiplier applied to every phase."""
        return self.config.scale

    def phase_time(self, kind: str, num_reqs: int, num_tokens: int) -> float:
        """Seconds of CPU phase `kind` for a step with these requests and tokens."""
        try:
            base, per_req, per_token = self._coef[kind]
        except KeyError:
            raise ValueError(f"unknown CPU phase {kind!r}; known {list(CPU_PHASES)}") from None
        return base + per_req * num_reqs + per_token * num_tokens

    def step_total(self, num_reqs: int, num_tokens: int) -> float:
        """The four phases every step has (what a sync engine adds to each GPU step)."""
        return sum(self.phase_time(k, num_reqs, num_tokens) for k in STEP_PHASES)

    def describe(self) -> dict:
        """Recorded in the run's config JSON."""
        return {
            "scale": self.config.scale,
            "source": self.config.source,
            "tp": self.tp,
            "phases": {k: asdict(v) for k, v in self.config.phases.items()},
            "tp_broadcast": asdict(self.config.tp_broadcast),
        }


def load_cpu_cost(path: str) -> CpuCostModel:
    """A CPU-cost model from a "cpu-cost" calibration file (`schedsim calibrate --cpu`)."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read CPU-cost calibration: {exc}") from exc
    if raw.get("kind", "cpu-cost") != "cpu-cost":
        raise ValueError(f"{path}: field 'kind' is {raw.get('kind')!r}, expected 'cpu-cost'")
    try:
        return CpuCostModel(CpuCostConfig.from_dict(raw))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from exc
