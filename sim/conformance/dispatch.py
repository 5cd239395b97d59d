"""`schedsim conformance`: each scenario goes to the replay of the engine whose format it is in.

A scenario whose "policy" is one of TensorRT-LLM's capacity policies is TensorRT-LLM's
(`trtllm.py`); one whose config names `pool_tokens` and `schedule_policy` is SGLang's
(`sglang.py`); any other is vLLM's (`vllm.py`). Printing the logs, or writing them with `--batch
OUTDIR`, is the same for all (`files.py`).
"""

from __future__ import annotations

import sys
from typing import Any

from schedsim.conformance import files, sglang, trtllm, vllm


def engine_of(scenario: Any) -> files.Replay:
    """The replay of the engine whose format the scenario is in."""
    if isinstance(scenario, dict) and scenario.get("policy") in trtllm.POLICIES:
        return trtllm.replay
    if sglang.is_sglang_scenario(scenario):
        return sglang.replay
    return vllm.replay


def replay(scenario: Any) -> files.Outcome:
    """Replay a scenario of any engine's format."""
    return engine_of(scenario)(scenario)


def main(paths: list[str], batch: str | None = None) -> int:
    """Print every scenario's log (or write them to `batch`); the worst exit status."""
    if batch is not None:
        return files.write_batch(replay, batch, paths, sys.stderr)
    return max(files.print_log(replay, path, sys.stdout, sys.stderr) for path in paths)
