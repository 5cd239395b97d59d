"""Engine overhead terms: what one serving engine adds to a step beyond the GPU kernels' own work.

A step of a real engine costs more than its kernels (docs/latency.md, "Overhead terms"):
- each TP all-reduce has a fixed latency that small decode messages never amortise (two per layer
  plus the logits gather to rank 0), growing with the number of ranks;
- a step that does not replay a CUDA graph is launched kernel by kernel from the host: the GPU
  cannot finish before the host has launched every layer (a floor, `launch_us_per_layer`);
- the host runs the engine's CPU phases (schedule, input preparation with the scheduler-output
  broadcast to TP workers, output processing), which a synchronous engine adds to every step.

An `EngineProfile` holds the structure of one engine (which steps replay CUDA graphs, who launches
kernels, multi-step scheduling); `OverheadTerms` holds the numbers for one (engine, GPU), resolved
from a fit file (the shipped `data/overhead_fit.json`, or one written by `schedsim calibrate
--measurements`).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

CUDA_GRAPH_MODES = ("none", "decode", "piecewise")
LAUNCHERS = ("python", "cpp")
# CPU cost per token of input preparation (the CPU-cost model's prepare_inputs default; not fitted)
PER_TOKEN_US = 0.02


@dataclass(frozen=True)
class EngineProfile:
    """How one engine runs a step: CUDA-graph capture, kernel launcher, scheduler steps per CPU pass."""

    name: str
    description: str
    # none: every step eager; decode: decode-only steps of <= cuda_graph_max_batch requests replay a
    # graph (vLLM V0); piecewise: steps of <= cuda_graph_max_batch tokens replay graphs (vLLM V1)
    cuda_graphs: str = "decode"
    cuda_graph_max_batch: int = 256
    launcher: str = "python"  # python: PyTorch eager modules; cpp: TensorRT / TurboMind enqueue
    num_scheduler_steps: int = 1  # multi-step scheduling: one CPU pass per this many steps
    fit_class: str = ""  # whose fitted numbers it uses (itself when empty)

    def __post_init__(self) -> None:
        if self.cuda_graphs not in CUDA_GRAPH_MODES:
            raise ValueError(
                f"EngineProfile {self.name!r}: field 'cuda_graphs' must be one of "
                f"{CUDA_GRAPH_MODES}, got {self.cuda_graphs!r}"
            )
        if self.launcher not in LAUNCHERS:
            raise ValueError(
                f"EngineProfile {self.name!r}: field 'launcher' must be one of "
                f"{LAUNCHERS}, got {self.launcher!r}"
            )
        for name in ("cuda_graph_max_batch", "num_scheduler_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"EngineProfile {self.name!r}: field {name!r} must be an integer >= 1, got {value!r}"
                )

    def eager(self, tokens: int, decode_only: bool) -> bool:
        """Whether a step is launched kernel by kernel (no CUDA-graph replay)."""
        if self.cuda_graphs == "none":
            return True
        if self.cuda_graphs == "decode":
            return not decode_only or tokens > self.cuda_graph_max_batch
        return tokens > self.cuda_graph_max_batch

    @property
    def fitted_as(self) -> str:
        """The engine class whose fitted numbers this profile uses."""
        return self.fit_class or self.name


ENGINE_PROFILES: dict[str, EngineProfile] = {
    p.name: p
    for p in (
        EngineProfile(
            "vllm",
            "vLLM V1 (what schedsim's vllm policies model): piecewise CUDA graphs for "
            "steps of up to 512 tokens (compilation_config.max_capture_size), eager beyond; "
            "collectives and launch cost as fitted for vLLM V0 with CUDA graphs; CPU phases "
            "from the CPU-cost model",
            cuda_graphs="piecewise",
            cuda_graph_max_batch=512,
            fit_class="vllm",
        ),
        EngineProfile(
            "vllm-v0-eager",
            "vLLM V0 without CUDA graphs (2023 releases, or "
            "enforce_eager=True): every step launched layer by layer from Python",
            cuda_graphs="none",
        ),
        EngineProfile(
            "vllm-v0-graph",
            "vLLM V0 0.3-0.6: decode-only batches of up to 256 requests replay "
            "CUDA graphs, prefill steps eager; custom all-reduce on NVLink",
        ),
        EngineProfile(
            "vllm-v0-multistep",
            "vLLM 0.6 with --num-scheduler-steps 10: one CPU pass "
            "(schedule, broadcast, output processing) per 10 decode steps",
            num_scheduler_steps=10,
            fit_class="vllm-v0-graph",
        ),
        EngineProfile(
            "trtllm-python",
            "TensorRT-LLM engine driven by its Python GenerationSession "
            "(NeMo inference 2023-24): decode loop in Python, kernels enqueued by TensorRT",
            cuda_graphs="none",
            launcher="cpp",
        ),
        EngineProfile(
            "trtllm-cpp",
            "C++ runtimes: TensorRT-LLM gptSessionBenchmark and ModelRunnerCpp "
            "(examples/run.py's default), LMDeploy TurboMind",
            cuda_graphs="none",
            launcher="cpp",
        ),
    )
}


def get_engine_profile(name: str) -> EngineProfile:
    """A shipped engine profile by name."""
    try:
        return ENGINE_PROFILES[name]
    except KeyError:
        raise KeyError(f"unknown engine {name!r}; known {sorted(ENGINE_PROFILES)}") from None


@dataclass(frozen=True)
class OverheadTerms:
    """The overhead terms of one engine on one GPU, in the units the formulas use."""

    engine: EngineProfile
    kernel_scale: float = 1.0  # multiplies the GPU model's kernel time (its all-reduces excluded)
    allreduce_latency_us: float = 6.6  # fixed latency of one all-reduce at TP 2
    allreduce_growth: float = 0.6  # relative growth of that latency per doubling of TP
    launch_us_per_layer: float = 350.0  # host time to launch one eager layer (host speed applied)
    # host CPU per step (schedule, prepare, sampling bookkeeping, output) and per scheduled request
    # per step; None: the CPU-cost model's documented defaults
    step_us: float | None = None
    per_request_us: float | None = None
    tp_broadcast_us: float = 100.0  # per step when TP > 1: scheduler output to the workers
    host_speed: float = 1.0  # host-time multiplier of this GPU's usual host (1 = DGX-H100 host)
    sources: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("kernel_scale", "host_speed"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"OverheadTerms: field {name!r} must be > 0, got {value!r}")
        for name in (
            "allreduce_latency_us",
            "allreduce_growth",
            "launch_us_per_layer",
            "step_us",
            "per_request_us",
            "tp_broadcast_us",
        ):
            value = getattr(self, name)
            if value is None and name in ("step_us", "per_request_us"):
                continue
            if not isinstance(value, int | float) or value < 0 or math.isnan(value):
                raise ValueError(f"OverheadTerms: field {name!r} must be a number >= 0, got {value!r}")

    def allreduce_latency_s(self, tp: int) -> float:
        """Fixed latency of one collective over `tp` ranks (0 at TP 1)."""
        if tp < 2:
            return 0.0
        return self.allreduce_latency_us * 1e-6 * (1.0 + self.allreduce_growth * math.log2(tp / 2))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (the engine by name)."""
        out = asdict(self)
        out["engine"] = self.engine.name
        return out


@lru_cache(maxsize=1)
def shipped_overhead_fit() -> dict[str, Any]:
    """The overhead terms fitted on every shipped measurement source (data/overhead_fit.json)."""
    ref = resources.files("schedsim.latency").joinpath("data", "overhead_fit.json")
    if not ref.is_file():
        return {"kind": "overhead-fit", "shared": {}, "gpus": {}, "engines": {}}
    return json.loads(ref.read_text())


GPU_FAMILY = {"a100-40gb": "a100-80gb", "h200": "h100-sxm"}  # same kernels, same kind of host


def resolve_terms(engine: str, gpu: str, fit: dict[str, Any] | None = None) -> OverheadTerms:
    """OverheadTerms for (engine, gpu): the fit file's numbers (a user calibration first, then the
    shipped fit), priors where neither has them."""
    profile = get_engine_profile(engine)
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for origin, f in (("shipped fit", shipped_overhead_fit()), ("calibration", fit)):
        if not f:
            continue
        label = f.get("_path", origin) if origin == "calibration" else "data/overhead_fit.json"
        shared = f.get("shared", {})
        for key in ("allreduce_growth",):
            if key in shared:
                values[key], sources[key] = float(shared[key]), label
        launch = shared.get("launch_us_per_layer", {})
        if profile.launcher in launch:
            values["launch_us_per_layer"] = float(launch[profile.launcher])
            sources["launch_us_per_layer"] = label
        gpus = f.get("gpus", {})
        entry = gpus.get(gpu) or gpus.get(GPU_FAMILY.get(gpu, ""))
        if entry:
            for key in ("kernel_scale", "host_speed"):
                if key in entry:
                    values[key], sources[key] = float(entry[key]), f"{label} [{gpu}]"
        numbers = f.get("engines", {}).get(profile.fitted_as, {})
        for key in ("allreduce_latency_us", "step_us", "per_request_us", "tp_broadcast_us"):
            if key in numbers:
                values[key], sources[key] = float(numbers[key]), f"{label} [{profile.fitted_as}]"
    host = values.get("host_speed", 1.0)
    values["launch_us_per_layer"] = values.get("launch_us_per_layer", 350.0) * host
    for key in ("step_us", "per_request_us", "tp_broadcast_us"):
        if key in values:
            values[key] *= host
    values.setdefault("tp_broadcast_us", 100.0 * host)
    return OverheadTerms(engine=profile, sources=sources, **values)
