"""`schedsim validate`: one workload on the real backend and in the simulator fitted to it, compared."""

from __future__ import annotations

import argparse
from typing import Any

from schedsim.cli.args import add_run_arguments, resolve_run_config
from schedsim.cli.backend import add_backend_arguments, backend_options
from schedsim.cli.rejections import report_rejections
from schedsim.outputs.folder import OutputFolder, chosen_out
from schedsim.run.rejections import rejections
from schedsim.run.resolve import check_config


def add_parser(sub: Any) -> None:
    """Register `validate`: the run flags, the real backend's flags and the report's folder."""
    p = sub.add_parser("validate", help="real backend vs the simulator fitted to it, step by step")
    add_run_arguments(p, "runs/validate-<YYYYmmdd-HHMMSS>")
    add_backend_arguments(p, with_switch=False)
    p.set_defaults(func=cmd_validate)
    p.add_argument(
        "--grid",
        choices=("quick", "full"),
        default="quick",
        help="calibration grid of step shapes (quick: seconds on a CPU; full: the backend's "
        "default CalibrationGrid)",
    )


def grid_for(name: str) -> Any:
    """The calibration grid by name."""
    from schedsim.backend.calibrate import CalibrationGrid  # torch, only for real runs

    if name == "full":
        return CalibrationGrid()
    return CalibrationGrid(
        prefill_tokens=(0, 16, 64),
        prefill_context=(0, 64),
        num_decodes=(0, 1, 4),
        decode_context=(16, 128),
        repeats=2,
    )


def cmd_validate(args: argparse.Namespace) -> int:
    """Calibrate, run for real, simulate the twin; write the comparison tables, summary and plot."""
    config = resolve_run_config(args)
    from schedsim.experiments.validate import validate  # lazy subcommand (torch)
    from schedsim.outputs.files import format_summary, write_json, write_run

    check_config(config)
    folder = OutputFolder(*chosen_out(args.out, "validate"))
    with folder as out:  # the lock and the write probe, before calibrating
        report = validate(config, backend=backend_options(args), grid=grid_for(args.grid))
        report.steps.to_parquet(out / "steps_compared.parquet", index=False)
        report.requests.to_parquet(out / "requests_compared.parquet", index=False)
        write_json(out / "validation.json", {"summary": report.summary, "calibration": report.calibration})
        report.plot(out / "validation.png")
        write_run(report.real, out / "real", plots=False)
        write_run(report.sim, out / "sim", plots=False)
    print(format_summary(report.summary))
    print(f"\nwrote {folder.final}/ (validation.json, validation.png, *_compared.parquet, real/, sim/)")
    found = rejections(report.real.summary, report.real.config.get("max_model_len"))
    return report_rejections([("the real run", found)], strict=False)
