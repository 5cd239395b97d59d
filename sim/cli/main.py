"""`schedsim`: the command line. Each subcommand is a module of this package with `add_parser`;
heavy modules (the simulator, matplotlib, torch) are imported only by the command that runs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from schedsim.cli import compare, conformance, latency, listings, run, sweep, trace, validate
from schedsim.cli.errors import guarded
from schedsim.cli.exit_codes import EXIT_INTERRUPTED


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree."""
    parser = argparse.ArgumentParser(
        prog="schedsim",
        description="A discrete-event simulator for LLM-serving schedulers: replay a "
        "workload through a scheduler policy on a modelled GPU and CPU, and compare policies.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    run.add_parser(sub)
    listings.add_parsers(sub)
    compare.add_parser(sub)
    sweep.add_parser(sub)
    validate.add_parser(sub)
    trace.add_parser(sub)
    latency.add_parsers(sub)
    conformance.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `schedsim` script."""
    return guarded(lambda: dispatch(argv))


def dispatch(argv: Sequence[str] | None) -> int:
    """Parse the command line and run the command (no command: the help, as a usage error)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt as exc:  # Ctrl-C: say what was kept, as a shell reports SIGINT
        fresh_line = "\n" if sys.stderr.isatty() else ""  # after a progress bar
        print(
            f"{fresh_line}schedsim {args.command}: {str(exc) or 'interrupted; nothing written'}",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
