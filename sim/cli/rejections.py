"""The warning a run that rejected requests ends with (red on a terminal), and `--strict`, which
turns it into an error: the outputs are written, the command exits 3."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from schedsim.cli.exit_codes import EXIT_STRICT
from schedsim.run.rejections import Rejections

RED, RESET = "\033[31m", "\033[0m"


def add_strict_argument(parser: argparse.ArgumentParser) -> None:
    """`--strict`: rejected requests fail the command instead of warning."""
    parser.add_argument(
        "--strict",
        action="store_true",
        help="fail (exit 3, outputs still written) when any request is rejected, instead of warning",
    )


def use_color() -> bool:
    """Red only for a person at a terminal (never into a file or a pipe; NO_COLOR turns it off)."""
    return sys.stderr.isatty() and not os.environ.get("NO_COLOR")


def report_rejections(found: Sequence[tuple[str | None, Rejections | None]], strict: bool) -> int:
    """One line per run that rejected requests (`label` names it among several); the exit status."""
    lines = [f"{label}: {r.message()}" if label else r.message() for label, r in found if r is not None]
    kind = "error" if strict else "warning"
    for line in lines:
        text = f"schedsim: {kind}: {line}"
        print(f"{RED}{text}{RESET}" if use_color() else text, file=sys.stderr)
    return EXIT_STRICT if strict and lines else 0
