"""`schedsim conformance SCENARIO.json ...`: replay scenarios and print their step logs."""

from __future__ import annotations

import argparse
from typing import Any

from schedsim.conformance import dispatch


def add_parser(sub: Any) -> None:
    """Register `conformance`."""
    p = sub.add_parser(
        "conformance",
        help="replay scenario JSONs through our policies with a fake "
        "model and print each step log (the format the engines' oracles print)",
        description="Replays each scenario through our policy for its engine (the scenario's "
        "format says which) and prints its step log in the engine's oracle format.",
    )
    p.add_argument(
        "--batch",
        metavar="OUTDIR",
        default=None,
        help="write each scenario's log to OUTDIR/<name>.jsonl, all in one process",
    )
    p.add_argument("scenarios", nargs="+", metavar="SCENARIO.json")
    p.set_defaults(func=cmd_conformance)


def cmd_conformance(args: argparse.Namespace) -> int:
    """Print (or write) the step logs; exit 2 if a scenario is invalid."""
    return dispatch.main(list(args.scenarios), batch=args.batch)
