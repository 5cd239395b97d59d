"""`schedsim validate`: one workload on the real backend and in the simulator fitted to it, compared."""

from __future__ import annotations

import argparse
import warnings
from typing import Any

from schedsim.cli.args import add_run_arguments, resolve_run_config
from schedsim.cli.backend import add_backend_arguments, announce, backend_options
from schedsim.cli.rejections import report_rejections
from schedsim.outputs.folder import OutputFolder, chosen_out
from schedsim.run.fieldtypes import field_error
from schedsim.run.rejections import rejections, unfinished
from schedsim.run.resolve import check_config


def add_parser(sub: Any) -> None:
    """Register `validate`: the run flags, the real backend's flags and the report's folder."""
    p = sub.add_parser("validate", help="real backend vs the simulator fitted to it, step by step")
    add_run_arguments(p, "runs/validate-<YYYYmmdd-HHMMSS>")
    add_backend_arguments(p, with_switch=False)
    p.set_defaults(func=cmd_validate)
    p.add_argument(
        "--grid",
        choices=("auto", "quick", "full"),
        default="auto",
        help="calibration grid of step shapes (auto: one covering the shapes the run computed; "
        "quick: a few small shapes, seconds on a CPU; full: the backend's default CalibrationGrid)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=6,
        help="timed repeats of every calibration shape and of every step of the run, interleaved; "
        "a step's time is their minimum (default: 6)",
    )


def grid_for(name: str, repeats: int) -> Any:
    """The calibration grid by name (None: `auto`, one covering the run's shapes)."""
    from schedsim.backend.calibrate import CalibrationGrid  # torch, only for real runs

    if name == "auto":
        return None
    if name == "full":
        return CalibrationGrid(repeats=repeats)
    return CalibrationGrid(
        prefill_tokens=(0, 16, 64),
        prefill_context=(0, 64),
        num_decodes=(0, 1, 4),
        decode_context=(16, 128),
        repeats=repeats,
    )


def cmd_validate(args: argparse.Namespace) -> int:
    """Calibrate, run for real, simulate the twin; write the comparison tables, summary and plot."""
    config = resolve_run_config(args)
    from schedsim.experiments.validate import validate  # lazy subcommand (torch)
    from schedsim.outputs.files import format_summary, write_json, write_run

    check_config(config)
    if args.repeats < 1:
        raise field_error("repeats", "must be >= 1", args.repeats)
    folder = OutputFolder(*chosen_out(args.out, "validate"))
    with folder as out:  # the lock and the write probe, before calibrating
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            report = validate(
                config,
                backend=backend_options(args),
                grid=grid_for(args.grid, args.repeats),
                full_trace=args.full_trace,
                progress=not args.no_progress,
                announce=announce,
                repeats=args.repeats,
            )
        for w in caught:
            announce(f"warning: {w.message}")
        report.steps.to_parquet(out / "steps_compared.parquet", index=False)
        report.requests.to_parquet(out / "requests_compared.parquet", index=False)
        report.grid_steps.to_parquet(out / "calibration_steps.parquet", index=False)
        write_json(out / "validation.json", {"summary": report.summary, "calibration": report.calibration})
        report.plot(out / "validation.png")
        write_run(report.real, out / "real", plots=False)
        write_run(report.sim, out / "sim", plots=False)
    print(format_summary(report.summary))
    print(f"\nwrote {folder.final}/ (validation.json, validation.png, *.parquet, real/, sim/)")
    found = rejections(report.real.summary, report.real.config.get("max_model_len"))
    return report_rejections(
        [("the real run", found)],
        strict=False,
        unfinished=[("the real run", unfinished(report.real.summary))],
    )
