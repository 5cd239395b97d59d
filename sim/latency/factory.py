"""make_latency_model: pick and build the latency model a run uses, from names or a calibration."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .base import LatencyModel
from .calibration import fitted_roofline_config
from .cpu_cost import CpuCostModel, load_cpu_cost
from .engines import ENGINE_PROFILES, resolve_terms
from .fitted import FittedStepModel
from .overhead import OverheadModel, cpu_cost_config
from .roofline import RooflineConfig, RooflineModel
from .specs import GpuSpec, ModelSpec, get_gpu_spec, get_model_spec
from .table import TableModel, find_profile

KINDS = ("auto", "roofline", "table", "fitted")
CALIBRATION_KINDS = ("roofline-fit", "fitted-step", "overhead-fit")
DEFAULT_ENGINE = "vllm"
ENGINES = (*ENGINE_PROFILES, "none")  # none: the bare GPU model, no overhead terms


def read_calibration(path: str | Path) -> dict[str, Any]:
    """A calibration file written by `schedsim calibrate` (JSON with a "kind" field)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read calibration file: {exc}") from exc
    if not isinstance(data, dict) or "kind" not in data:
        raise ValueError(f"{path}: calibration file needs a top-level 'kind' field")
    data["_path"] = str(path)
    return data


def engine_for(calibration: dict[str, Any] | None, engine: str | None) -> str:
    """The engine whose overhead terms apply: the argument, else the calibration's, else vllm."""
    name = engine or (calibration or {}).get("engine") or DEFAULT_ENGINE
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; known {list(ENGINES)}")
    return name


def make_latency_model(
    model: str | ModelSpec,
    gpu: str | GpuSpec,
    tp: int = 1,
    kind: str = "auto",
    calibration: str | None = None,
    engine: str | None = None,
) -> LatencyModel:
    """auto = the table model when a profile exists for (model, gpu, tp), else the fitted roofline;
    either wrapped in the engine's overhead terms (engine="none": the bare GPU model)."""
    if kind not in KINDS:
        raise ValueError(f"unknown latency model kind {kind!r}; known {list(KINDS)}")
    if tp < 1:
        raise ValueError(f"tp must be >= 1, got {tp}")
    m, g = get_model_spec(model), get_gpu_spec(gpu)
    cal = read_calibration(calibration) if calibration else None
    if cal is not None and cal["kind"] not in CALIBRATION_KINDS:
        raise ValueError(
            f"{calibration}: calibration kind {cal['kind']!r} is not a GPU latency "
            f"calibration (expected one of {list(CALIBRATION_KINDS)})"
        )
    if kind == "fitted" or (cal is not None and cal["kind"] == "fitted-step" and kind == "auto"):
        if cal is None or cal["kind"] != "fitted-step":
            raise ValueError(
                "kind='fitted' needs calibration=PATH of a fitted-step calibration "
                "(write one with `schedsim calibrate --steps CSV`)"
            )
        return FittedStepModel.from_calibration(cal)
    base = _gpu_model(m, g, tp, kind, cal)
    name = engine_for(cal if cal is not None and cal["kind"] == "overhead-fit" else None, engine)
    if name == "none":
        return base
    overhead = cal if cal is not None and cal["kind"] == "overhead-fit" else None
    return OverheadModel(base, resolve_terms(name, g.name, overhead))


def _gpu_model(m: ModelSpec, g: GpuSpec, tp: int, kind: str, cal: dict[str, Any] | None) -> Any:
    """The bare GPU model: the table model where a profile exists (auto, table), else the roofline."""
    roofline = RooflineModel(m, g, tp, _roofline_config(g, cal))
    if kind == "roofline":
        return roofline
    profile = find_profile(m, g, tp, cal)
    if profile is None:
        if kind == "table":
            raise ValueError(
                f"no measured profile for model {m.name!r} on {g.name!r} at tp={tp}; "
                f"use kind='roofline' or import one with `schedsim calibrate --profile`"
            )
        return roofline
    return TableModel(profile, roofline)


def make_cpu_cost_model(
    gpu: str | GpuSpec,
    tp: int = 1,
    calibration: str | None = None,
    engine: str | None = None,
    cpu_cost_file: str | None = None,
    scale: float = 1.0,
) -> CpuCostModel:
    """The CPU-phase model a run uses: a `calibrate --cpu` file if given, else the engine's host
    terms (an overhead calibration's fit, or the shipped ones); x scale."""
    if cpu_cost_file is not None:
        base = load_cpu_cost(cpu_cost_file)
        return CpuCostModel(base.config, scale=base.scale * scale, tp=tp)
    cal = read_calibration(calibration) if calibration else None
    overhead = cal if cal is not None and cal["kind"] == "overhead-fit" else None
    name = engine_for(overhead, engine)
    if name == "none":
        return CpuCostModel(scale=scale, tp=tp)
    config = cpu_cost_config(resolve_terms(name, get_gpu_spec(gpu).name, overhead))
    return CpuCostModel(config, scale=config.scale * scale, tp=tp)


def _roofline_config(gpu: GpuSpec, cal: dict[str, Any] | None) -> RooflineConfig:
    """Fitted efficiencies: from the calibration file if it has this GPU, else the shipped fit."""
    return fitted_roofline_config(gpu, cal)
