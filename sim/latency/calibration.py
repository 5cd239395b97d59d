"""Calibration files: fit the roofline to profiles, write/read the result, pick a GPU's factors."""

from __future__ import annotations

import json
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
            entry["config"].update({k: params[k] for k in ("attn_compute_eff", "attn_memory_eff",
                                                           "attn_overhead_us")})
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
    """Write a calibration as indented JSON."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({k: v for k, v in cal.items() if not k.startswith("_")}, indent=1))
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
    return RooflineConfig(**{k: v for k, v in raw.items() if k in known and k != "source"},
                          source=source)


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


def _calibrate_measurements(args: Any) -> tuple[dict[str, Any], str]:
    """`calibrate --measurements`: one deployment's overhead terms and their held-out error."""
    from .calibrate_overhead import calibrate_measurements
    from .measurements import read_measurements

    missing = [f"--{k}" for k in ("model", "gpu", "tp") if getattr(args, k) is None]
    if missing:
        raise ValueError(f"--measurements needs {', '.join(missing)} (the deployment measured)")
    df = read_measurements(args.measurements, args.model, args.gpu, args.tp, args.engine,
                           args.batch_size, args.input_len, args.output_len)
    cal = calibrate_measurements(df, args.model, args.gpu, args.tp, args.engine,
                                 source=str(args.measurements))

    def pct(stats: dict[str, Any]) -> str:
        if not stats.get("n"):
            return "n/a (too few measurements)"
        return (f"median {stats['median_abs']:.1%} (signed {stats['median_signed']:+.1%}), "
                f"p90 {stats['p90_abs']:.1%}, n={stats['n']}")

    terms = "; ".join(f"{k} {v}" for e in cal["engines"].values() for k, v in e.items())
    gpu = "; ".join(f"{k} {v}" for g in cal["gpus"].values() for k, v in g.items())
    summary = (f"calibrated {args.engine} for {args.model} on {args.gpu} tp={args.tp} from "
               f"{len(df)} measurements\n  engine terms: {terms}\n  gpu: {gpu}; launch "
               f"{cal['shared']['launch_us_per_layer']} us/layer\n"
               f"  error before: {pct(cal['error_before'])}\n  in-sample:    {pct(cal['fit_error'])}\n"
               f"  {cal['cv_error']['folds']}-fold held-out: {pct(cal['cv_error'])}")
    return cal, summary


def calibrate_from_args(args: Any) -> tuple[Path, str]:
    """`schedsim calibrate`: one of --profile, --steps, --measurements or --cpu; (path, summary)."""
    out = Path(args.out)
    if args.profile:
        from .profiles import import_vidur, write_profiles

        folder = out.parent / f"{out.stem}_profiles"
        profiles = import_vidur(args.profile)
        write_profiles(profiles, folder)
        cal = fit_roofline(profiles, source=str(args.profile))
        cal["profiles"] = folder.name
        lines = [f"{g}: " + ", ".join(f"{op} {e['median_rel_err']:.1%}/{e['p90_rel_err']:.1%}"
                                      for op, e in entry["fit_error"].items())
                 for g, entry in cal["gpus"].items()]
        summary = (f"imported {len(profiles.keys())} (model, gpu, tp) profiles into {folder}\n"
                   "roofline fit, median/p90 relative error per operator:\n" + "\n".join(lines))
    elif getattr(args, "measurements", None):
        cal, summary = _calibrate_measurements(args)
    elif args.steps:
        from .fitted import fit_step_model, read_step_csv

        cal = fit_step_model(read_step_csv(args.steps), source=str(args.steps), model=args.model,
                             gpu=args.gpu, tp=args.tp)
        summary = (f"fitted {cal['num_steps']} steps: {cal['coefficients']}\n"
                   f"in-sample median/p90 error {cal['fit_error']['median_rel_err']:.1%}/"
                   f"{cal['fit_error']['p90_rel_err']:.1%}; 5-fold held-out "
                   f"{cal['cv_error']['median_rel_err']:.1%}/{cal['cv_error']['p90_rel_err']:.1%}")
    else:
        from dataclasses import asdict

        from .cpu_calibrate import calibrate_cpu_costs

        cfg = calibrate_cpu_costs(args.policy)
        cal = {"kind": "cpu-cost", "scale": cfg.scale, "source": cfg.source,
               "phases": {k: asdict(v) for k, v in cfg.phases.items()}}
        summary = "\n".join(f"{k}: base {v['base'] * 1e6:.1f} us + {v['per_req'] * 1e6:.2f} us/req"
                            for k, v in cal["phases"].items())
    return write_calibration(cal, out), summary
