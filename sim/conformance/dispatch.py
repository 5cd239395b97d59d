"""`schedsim conformance`: each scenario goes to the engine whose format it is in.

A scenario whose config names `pool_tokens` and `schedule_policy` is SGLang's
(`schedsim.conformance.sglang`); any other is vLLM's (`schedsim.conformance.vllm`). `--batch
OUTDIR` (write each log to OUTDIR/<name>.jsonl) is SGLang's.
"""

from __future__ import annotations

import json
import sys

from schedsim.conformance import sglang, vllm


def _engine_main(path: str):
    """The `main` of the engine the scenario at `path` is for (vLLM's reports unreadable files)."""
    try:
        with open(path) as f:
            scenario = json.load(f)
    except (OSError, json.JSONDecodeError):
        return vllm.main
    return sglang.main if sglang.is_sglang_scenario(scenario) else vllm.main


def main(argv: list[str]) -> int:
    """Replay each scenario on its engine's policy and print its step log; the worst exit code."""
    args = argv[1:] if argv and argv[0] == "conformance" else list(argv)
    if not args or args[0] in ("-h", "--help"):
        print(
            "usage: schedsim conformance SCENARIO.json [...] | --batch OUTDIR SCENARIO.json [...]\n"
            "Replays vLLM scenarios (vllm / vllm-async) or SGLang scenarios (sglang-overlap;\n"
            "config with pool_tokens and schedule_policy) with the fake model and prints each\n"
            "step log.",
            file=sys.stderr,
        )
        return 0 if args else 2
    if args[0] == "--batch":
        return sglang.main(args)
    return max(_engine_main(path)([path]) for path in args)
