"""`schedsim conformance`: each scenario goes to the replay of the engine whose format it is in.

A scenario whose "policy" is one of TensorRT-LLM's capacity policies is TensorRT-LLM's
(`trtllm.py`); one whose config names `pool_tokens` and `schedule_policy` is SGLang's
(`sglang.py`); any other is vLLM's (`vllm.py`, which also reports unreadable files). With
`--batch OUTDIR` each engine's replay writes its scenarios' logs to OUTDIR/<name>.jsonl.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from schedsim.conformance import sglang, trtllm, vllm

Main = Callable[[list[str]], int]


def engine_of(path: str) -> Main:
    """The `main` of the engine whose format the scenario at `path` is in."""
    try:
        with open(path) as f:
            scenario = json.load(f)
    except (OSError, json.JSONDecodeError):
        return vllm.main
    if isinstance(scenario, dict) and scenario.get("policy") in trtllm.POLICIES:
        return trtllm.main
    if sglang.is_sglang_scenario(scenario):
        return sglang.main
    return vllm.main


def main(paths: list[str], batch: str | None = None) -> int:
    """Replay every scenario on its engine's policies; the worst exit status of them all."""
    by_engine: dict[Main, list[str]] = {}
    for path in paths:
        by_engine.setdefault(engine_of(path), []).append(path)
    if batch is not None:
        return max(run(["--batch", batch, *group]) for run, group in by_engine.items())
    return max(engine_of(path)([path]) for path in paths)
