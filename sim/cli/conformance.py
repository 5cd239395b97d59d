"""`schedsim conformance SCENARIO.json ...`: replay scenarios and print their step logs."""

from __future__ import annotations

import argparse
from typing import Any

from schedsim.conformance import vllm


def add_parser(sub: Any) -> None:
    """Register `conformance`."""
    p = sub.add_parser(
        "conformance",
        help="replay scenario JSONs through our policies with a fake "
        "model and print each step log (the format the engines' oracles print)",
        description="Replays each scenario through vllm / vllm-async and prints one "
        "JSON line per step: {step, scheduled, preempted, finished}.",
    )
    p.add_argument("scenarios", nargs="+", metavar="SCENARIO.json")
    p.set_defaults(func=cmd_conformance)


def cmd_conformance(args: argparse.Namespace) -> int:
    """Print the step logs; exit 2 if a scenario is invalid."""
    return vllm.main(list(args.scenarios))
