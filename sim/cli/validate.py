"""`schedsim validate`: one workload on the real backend and in the simulator fitted to it, compared."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_validate_parser(sub: Any, add_run_arguments: Any, backend_flags: Any) -> None:
    """The `validate` subcommand: the run flags, the real backend's flags and the report's folder."""
    p = sub.add_parser("validate", help="real backend vs the simulator fitted to it, step by step")
    p.set_defaults(func=cmd_validate, _dests=add_run_arguments(p, "runs/validate"))
    backend_flags(p, with_switch=False)
    p.add_argument("--grid", choices=("quick", "full"), default="quick",
                   help="calibration grid of step shapes (quick: seconds on a CPU; full: the backend's "
                        "default CalibrationGrid)")


def grid_for(name: str) -> Any:
    """The calibration grid by name."""
    from schedsim.backend.calibrate import CalibrationGrid

    if name == "full":
        return CalibrationGrid()
    return CalibrationGrid(prefill_tokens=(0, 16, 64), prefill_context=(0, 64), num_decodes=(0, 1, 4),
                           decode_context=(16, 128), repeats=2)


def cmd_validate(args: argparse.Namespace) -> int:
    """Calibrate, run for real, simulate the twin; write the comparison tables, summary and plot."""
    from schedsim.cli.main import check_config, resolve_run_config
    from schedsim.outputs.files import format_summary, write_json, write_run
    from schedsim.run.real import backend_options
    from schedsim.experiments.validate import validate

    config = resolve_run_config(args, args._dests)
    check_config(config)
    report = validate(config, backend=backend_options(args), grid=grid_for(args.grid))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report.steps.to_parquet(out / "steps_compared.parquet", index=False)
    report.requests.to_parquet(out / "requests_compared.parquet", index=False)
    write_json(out / "validation.json", {"summary": report.summary, "calibration": report.calibration})
    report.plot(out / "validation.png")
    write_run(report.real, out / "real", plots=False)
    write_run(report.sim, out / "sim", plots=False)
    print(format_summary(report.summary))
    print(f"\nwrote {out}/ (validation.json, validation.png, *_compared.parquet, real/, sim/)")
    return 0
