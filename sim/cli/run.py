"""`schedsim run`: one workload through one policy, written to an output folder."""

from __future__ import annotations

import argparse
from typing import Any

from schedsim.cli.args import add_run_arguments, resolve_run_config
from schedsim.cli.backend import add_backend_arguments, announce, backend_options
from schedsim.cli.rejections import add_strict_argument, report_rejections
from schedsim.outputs.folder import OutputFolder, chosen_out
from schedsim.policies import EngineFailure
from schedsim.run.rejections import rejections, unfinished
from schedsim.run.resolve import check_config


def add_parser(sub: Any) -> None:
    """Register `run`."""
    p = sub.add_parser("run", help="replay a workload through one policy and write an output directory")
    add_run_arguments(p, "runs/<policy>-<YYYYmmdd-HHMMSS>")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    add_strict_argument(p)
    add_backend_arguments(p)
    p.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    """Replay one workload through one policy and write the output directory, whole."""
    config = resolve_run_config(args)  # config errors first, before heavy imports
    check_config(config)
    from schedsim.outputs.files import format_summary, write_run  # lazy subcommand
    from schedsim.outputs.plot_worker import start_plot_worker
    from schedsim.run.simulate import simulate

    folder = OutputFolder(*chosen_out(args.out, config.policy))
    with folder as tmp:  # the lock and the write probe, before simulating
        worker = start_plot_worker(not args.no_plots)  # imports matplotlib while this one simulates
        try:
            if args.backend == "real":  # the same policy and engine loop on the real model
                from schedsim.run.real import run_real  # torch, only for real runs

                result = run_real(
                    config,
                    backend=backend_options(args),
                    full_trace=args.full_trace,
                    progress=not args.no_progress,
                    announce=announce,
                )
            else:
                result = simulate(config, progress=not args.no_progress)
            write_run(result, tmp, plots=not args.no_plots, worker=worker)
        except BaseException as exc:  # Ctrl-C or an error: stop the plot worker now, not after its figures
            if worker is not None:
                worker.abandon()
            if isinstance(exc, EngineFailure):
                exc.add_note(config.policy)  # the run it stopped, in the error line
            raise
        finally:
            if worker is not None:
                worker.close()
    print(format_summary(result.summary))
    print(f"\nwrote {folder.final}/")
    found = rejections(result.summary, result.config.get("max_model_len"))
    return report_rejections([(None, found)], args.strict, [(None, unfinished(result.summary))])
