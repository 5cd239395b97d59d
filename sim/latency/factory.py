"""make_latency_model: pick and build the latency model a run uses, from names or a calibration."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .base import LatencyModel
from .roofline import RooflineConfig, RooflineModel
from .specs import GpuSpec, ModelSpec, get_gpu_spec, get_model_spec

KINDS = ("auto", "roofline", "table", "fitted")


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


def make_latency_model(
    model: str | ModelSpec,
    gpu: str | GpuSpec,
    tp: int = 1,
    kind: str = "auto",
    calibration: str | None = None,
) -> LatencyModel:
    """auto = the table model when a profile exists for (model, gpu, tp), else the fitted roofline."""
    if kind not in KINDS:
        raise ValueError(f"unknown latency model kind {kind!r}; known {list(KINDS)}")
    if tp < 1:
        raise ValueError(f"tp must be >= 1, got {tp}")
    m, g = get_model_spec(model), get_gpu_spec(gpu)
    cal = read_calibration(calibration) if calibration else None
    if cal is not None and cal["kind"] not in ("roofline-fit", "fitted-step"):
        raise ValueError(
            f"{calibration}: calibration kind {cal['kind']!r} is not a GPU latency "
            f"calibration (expected 'roofline-fit' or 'fitted-step')"
        )
    if kind == "fitted" or (cal is not None and cal["kind"] == "fitted-step" and kind == "auto"):
        from .fitted import FittedStepModel

        if cal is None or cal["kind"] != "fitted-step":
            raise ValueError(
                "kind='fitted' needs calibration=PATH of a fitted-step calibration "
                "(write one with `schedsim calibrate --steps CSV`)"
            )
        return FittedStepModel.from_calibration(cal)
    roofline = RooflineModel(m, g, tp, _roofline_config(g, cal))
    if kind == "roofline":
        return roofline
    from .table import TableModel, find_profile

    profile = find_profile(m, g, tp, cal)
    if profile is None:
        if kind == "table":
            raise ValueError(
                f"no measured profile for model {m.name!r} on {g.name!r} at tp={tp}; "
                f"use kind='roofline' or import one with `schedsim calibrate --profile`"
            )
        return roofline
    return TableModel(profile, roofline)


def _roofline_config(gpu: GpuSpec, cal: dict[str, Any] | None) -> RooflineConfig:
    """Fitted efficiencies: from the calibration file if it has this GPU, else the shipped fit."""
    from .calibration import fitted_roofline_config

    return fitted_roofline_config(gpu, cal)
