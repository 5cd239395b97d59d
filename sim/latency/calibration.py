"""Calibration files: fit the roofline to profiles, write/read the result, pick a GPU's factors."""

from __future__ import annotations

import json
import os
from dataclasses import fields
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from .fit_roofline import FIT_DONOR, fit_all_reduce, fit_attention, fit_operators
from .profiles import Profiles
from .roofline import RooflineConfig
from .specs import GpuSpec


def fit_roofline(profiles: Profiles, source: str = "") -> dict[str, Any]:
    """A "roofline-fit" calibration: per-GPU efficiency factors and their error per operator."""
    gpus: dict[str, dict[str, Any]] = {}
    for gpu in sorted(profiles.compute.gpu.unique()) if not profiles.compute.empty else []:
        params, errors = fit_operators(profiles, gpu)
        comm = fit_all_reduce(profiles, gpu)
        if comm is not None:
            params.update(comm[0])
            errors.update(comm[1])
        gpus[gpu] = {"config": params, "fit_error": errors}
    attn = fit_attention(profiles, {g: v["config"] for g, v in gpus.items()})
    if attn is not None:
        params, errors = attn
        for gpu, entry in gpus.items():
            entry["config"].update(
                {k: params[k] for k in ("attn_compute_eff", "attn_memory_eff", "attn_overhead_us")}
            )
            entry["attention_from"] = f"{params['gpu']} ({params['model']})"
            if gpu == params["gpu"]:
                entry["fit_error"].update(errors)
    for entry in gpus.values():
        entry["config"] = _rounded(entry["config"])
    return {"kind": "roofline-fit", "source": source, "gpus": gpus}


def _rounded(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return round(float(value), 5) if isinstance(value, float) else value


def write_calibration(cal: dict[str, Any], path: str | Path) -> Path:
    """Write a calibration as indented JSON, whole (through a temporary file and a rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")  # a reader never sees half a file
    tmp.write_text(json.dumps({k: v for k, v in cal.items() if not k.startswith("_")}, indent=1))
    os.replace(tmp, path)
    return path


@lru_cache(maxsize=1)
def shipped_fit() -> dict[str, Any]:
    """The shipped fit file, or an empty fit if it was not generated."""
    ref = resources.files("schedsim.latency").joinpath("data", "roofline_fit.json")
    if not ref.is_file():
        return {"kind": "roofline-fit", "gpus": {}}
    return json.loads(ref.read_text())


def _config(raw: dict[str, Any], source: str) -> RooflineConfig:
    known = {f.name for f in fields(RooflineConfig)}
    return RooflineConfig(**{k: v for k, v in raw.items() if k in known and k != "source"}, source=source)


def fitted_roofline_config(gpu: GpuSpec, calibration: dict[str, Any] | None = None) -> RooflineConfig:
    """The calibration's fit for this GPU, else the shipped fit (or its donor's), else priors."""
    for fit, origin in ((calibration, "calibration"), (shipped_fit(), "shipped fit")):
        if not fit or fit.get("kind") != "roofline-fit":
            continue
        gpus = fit.get("gpus", {})
        where = fit.get("_path", "roofline_fit.json")
        for name in (gpu.name, FIT_DONOR.get(gpu.name)):
            if name in gpus:
                label = name if name == gpu.name else f"{name} for {gpu.name}"
                return _config(gpus[name]["config"], f"{origin} {where} [{label}]")
    return RooflineConfig.from_gpu(gpu)
