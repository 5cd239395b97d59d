"""`schedsim validate`: the real backend against the simulator fitted to it (registered lazily)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .realtime_run import add_backend_arguments, backend_options


def add_validate_parser(subparsers: Any) -> None:
    """Register `validate` on the top-level CLI's subparsers."""
    from .cli import add_run_arguments

    p = subparsers.add_parser(
        "validate", help="replay a small workload on the real backend and in the simulator fitted to it",
        description="Time a grid of step shapes on the real backend, fit the whole-step model, replay "
        "the workload for real and in simulation, and report per-step and per-request errors.")
    p.set_defaults(func=cmd_validate, _dests=add_run_arguments(p, "runs/validate"))
    add_backend_arguments(p, with_switch=False)
    p.add_argument("--grid", choices=("quick", "full"), default="quick",
                   help="calibration grid of step shapes (quick: a few seconds on a CPU)")


def grid_for(name: str) -> Any:
    """The calibration grid by name."""
    from .backend.calibrate import CalibrationGrid

    if name == "full":
        return CalibrationGrid()
    return CalibrationGrid(prefill_tokens=(0, 16, 64), prefill_context=(0, 64), num_decodes=(0, 1, 4),
                           decode_context=(16, 128), repeats=2)


def cmd_validate(args: argparse.Namespace) -> int:
    """Run the validation and write steps.csv, requests.csv, summary.json and validate.png."""
    from .cli import resolve_run_config
    from .realtime_validate import validate

    config = resolve_run_config(args, args._dests)
    try:
        report = validate(config, backend=backend_options(args), grid=grid_for(args.grid))
    except ValueError as exc:
        print(f"schedsim validate: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report.steps.to_csv(out / "steps.csv", index=False)
    report.requests.to_csv(out / "requests.csv", index=False)
    (out / "summary.json").write_text(json.dumps(report.summary, indent=2, default=str))
    report.plot(out / "validate.png")
    for key, value in report.summary.items():
        print(f"{key:32s} {value:.3f}" if isinstance(value, float) else f"{key:32s} {value}")
    print(f"\nwrote {out}/")
    return 0
