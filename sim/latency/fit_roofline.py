"""Roofline efficiencies fitted per GPU to measured operator times (shipped in data/roofline_fit.json)."""

from __future__ import annotations

import json
from dataclasses import fields
from functools import lru_cache
from importlib import resources
from typing import Any

from .roofline import RooflineConfig
from .specs import GpuSpec

# GPUs without their own measurements borrow the fit of a GPU with the same generation of SMs.
FIT_DONOR = {"h200": "h100-sxm"}


@lru_cache(maxsize=1)
def shipped_fit() -> dict[str, Any]:
    """The shipped fit file, or an empty fit if it was not generated."""
    ref = resources.files("schedsim.latency").joinpath("data", "roofline_fit.json")
    if not ref.is_file():
        return {"gpus": {}}
    return json.loads(ref.read_text())


def _config(raw: dict[str, Any], source: str) -> RooflineConfig:
    known = {f.name for f in fields(RooflineConfig)}
    return RooflineConfig(**{k: v for k, v in raw.items() if k in known and k != "source"},
                          source=source)


def fitted_roofline_config(gpu: GpuSpec, calibration: dict[str, Any] | None = None) -> RooflineConfig:
    """The calibration's fit for this GPU, else the shipped fit (or its donor's), else priors."""
    for fit, origin in ((calibration, "calibration"), (shipped_fit(), "shipped fit")):
        if not fit or fit.get("kind", "roofline-fit") != "roofline-fit":
            continue
        gpus = fit.get("gpus", {})
        where = fit.get("_path", "roofline_fit.json")
        if gpu.name in gpus:
            return _config(gpus[gpu.name]["config"], f"{origin} {where} [{gpu.name}]")
        donor = FIT_DONOR.get(gpu.name)
        if donor in gpus:
            return _config(gpus[donor]["config"], f"{origin} {where} [{donor} for {gpu.name}]")
    return RooflineConfig.from_gpu(gpu)
