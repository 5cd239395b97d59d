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


def report_rejections(
    found: Sequence[tuple[str | None, Rejections | None]],
    strict: bool,
    unfinished: Sequence[tuple[str | None, str | None]] = (),
) -> int:
    """One line per run that rejected requests (`label` names it among several), and a warning per
    run that ended with requests unfinished (`unfinished`: label, message); the exit status."""
    lines = [f"{label}: {r.message()}" if label else r.message() for label, r in found if r is not None]
    kind = "error" if strict else "warning"
    for line in lines:
        _print(f"schedsim: {kind}: {line}")
    for label, message in unfinished:
        if message is not None:
            warn(f"{label}: {message}" if label else message)
    return EXIT_STRICT if strict and lines else 0


def warn(text: str) -> None:
    """`schedsim: warning: <text>` on stderr, red for a person at a terminal."""
    _print(f"schedsim: warning: {text}")


def _print(text: str) -> None:
    """A line on stderr, red for a person at a terminal."""
    print(f"{RED}{text}{RESET}" if use_color() else text, file=sys.stderr)
