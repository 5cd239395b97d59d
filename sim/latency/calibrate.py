"""`schedsim calibrate`: import Vidur-format profiles and fit the roofline (--profile), fit the
whole-step model to measured step times (--steps), fit one deployment's overhead terms to its
measured step times or request latencies (--measurements), or time our policies' CPU phases
(--cpu); each writes a calibration file (calibration.py)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .calibrate_overhead import calibrate_measurements
from .calibration import fit_roofline, write_calibration
from .cpu_calibrate import calibrate_cpu_costs
from .fitted import fit_step_model, read_step_csv
from .measurements import read_measurements
from .profiles import import_vidur, write_profiles

# What a `calibrate --cpu` file's numbers are the cost of (recorded in the file and each run's config).
CPU_MEASURES = (
    "schedsim's own {policy!r} policy code (schedule, update_from_output) timed in-process; "
    "the simulator's CPU work, not an engine's host overhead"
)


def _calibrate_measurements(args: Any) -> tuple[dict[str, Any], str]:
    """`calibrate --measurements`: one deployment's overhead terms and their held-out error."""
    missing = [f"--{k}" for k in ("model", "gpu", "tp") if getattr(args, k) is None]
    if missing:
        raise ValueError(f"--measurements needs {', '.join(missing)} (the deployment measured)")
    df = read_measurements(
        args.measurements,
        args.model,
        args.gpu,
        args.tp,
        args.engine,
        args.batch_size,
        args.input_len,
        args.output_len,
    )
    cal = calibrate_measurements(
        df, args.model, args.gpu, args.tp, args.engine, source=str(args.measurements)
    )

    def pct(stats: dict[str, Any]) -> str:
        if not stats.get("n"):
            return "n/a (too few measurements)"
        return (
            f"median {stats['median_abs']:.1%} (signed {stats['median_signed']:+.1%}), "
            f"p90 {stats['p90_abs']:.1%}, n={stats['n']}"
        )

    terms = "; ".join(f"{k} {v}" for e in cal["engines"].values() for k, v in e.items())
    gpu = "; ".join(f"{k} {v}" for g in cal["gpus"].values() for k, v in g.items())
    summary = (
        f"calibrated {args.engine} for {args.model} on {args.gpu} tp={args.tp} from "
        f"{len(df)} measurements\n  engine terms: {terms}\n  gpu: {gpu}; launch "
        f"{cal['shared']['launch_us_per_layer']} us/layer\n"
        f"  error before: {pct(cal['error_before'])}\n  in-sample:    {pct(cal['fit_error'])}\n"
        f"  {cal['cv_error']['folds']}-fold held-out: {pct(cal['cv_error'])}"
    )
    return cal, summary


def write_folder_whole(folder: Path, write: Callable[[Path], object]) -> None:
    """Write a folder into a temporary sibling and rename it into place: the folder is the old
    one or the new one, never a mix."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.partial-", dir=folder.parent))
    mask = os.umask(0o022)
    os.umask(mask)
    os.chmod(tmp, 0o777 & ~mask)  # the folder a plain mkdir would make
    try:
        write(tmp)
        old = folder.with_name(f".{folder.name}.old-{os.getpid()}")
        if folder.exists():
            os.rename(folder, old)
        os.rename(tmp, folder)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def calibrate_from_args(args: Any) -> tuple[Path, str]:
    """`schedsim calibrate`: one of --profile, --steps, --measurements or --cpu; (path, summary)."""
    out = Path(args.out)
    if args.profile:
        folder = out.parent / f"{out.stem}_profiles"
        profiles = import_vidur(args.profile)
        write_folder_whole(folder, lambda tmp: write_profiles(profiles, tmp))
        cal = fit_roofline(profiles, source=str(args.profile))
        cal["profiles"] = folder.name
        lines = [
            f"{g}: "
            + ", ".join(
                f"{op} {e['median_rel_err']:.1%}/{e['p90_rel_err']:.1%}"
                for op, e in entry["fit_error"].items()
            )
            for g, entry in cal["gpus"].items()
        ]
        summary = (
            f"imported {len(profiles.keys())} (model, gpu, tp) profiles into {folder}\n"
            "roofline fit, median/p90 relative error per operator:\n" + "\n".join(lines)
        )
    elif getattr(args, "measurements", None):
        cal, summary = _calibrate_measurements(args)
    elif args.steps:
        cal = fit_step_model(
            read_step_csv(args.steps), source=str(args.steps), model=args.model, gpu=args.gpu, tp=args.tp
        )
        summary = (
            f"fitted {cal['num_steps']} steps: {cal['coefficients']}\n"
            f"in-sample median/p90 error {cal['fit_error']['median_rel_err']:.1%}/"
            f"{cal['fit_error']['p90_rel_err']:.1%}; 5-fold held-out "
            f"{cal['cv_error']['median_rel_err']:.1%}/{cal['cv_error']['p90_rel_err']:.1%}"
        )
    else:
        cfg = calibrate_cpu_costs(args.policy)
        cal = {
            "kind": "cpu-cost",
            "measures": CPU_MEASURES.format(policy=args.policy),
            "scale": cfg.scale,
            "source": cfg.source,
            "phases": {k: asdict(v) for k, v in cfg.phases.items()},
        }
        summary = "\n".join(
            [
                f"timed schedsim's own {args.policy!r} policy code on this machine (the simulator's "
                "CPU work, not an engine's host overhead):",
                *(
                    f"{k}: base {v['base'] * 1e6:.1f} us + {v['per_req'] * 1e6:.2f} us/req"
                    for k, v in cal["phases"].items()
                ),
                "a run with --cpu-cost-file this file models an engine as fast as schedsim's policies; "
                "an engine's own host terms come from `schedsim calibrate --measurements`",
            ]
        )
    return write_calibration(cal, out), summary
