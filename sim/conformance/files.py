"""Scenario files in, step logs out, the same way for every engine's replay.

An engine's replay turns a scenario (parsed JSON) into an `Outcome`: its step log as JSON lines and,
where the engine itself fails on the scenario (TensorRT-LLM's wedges, vLLM's assertions), the exit
status and a one-line reason; an invalid scenario raises `ScenarioError` naming the field. Printing
a log, or writing a batch of them to OUTDIR/<name>.jsonl (and <name>.err with the reason), is the
same for all engines.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

EXIT_INVALID = 2  # the scenario breaks its format's contract


class ScenarioError(ValueError):
    """A scenario that breaks its format's contract; the message names the field."""


@dataclass(frozen=True)
class Outcome:
    """What replaying one scenario gave: its log (up to where the engine fails) and why it stopped."""

    log: str
    status: int = 0  # 0, or the engine's own failure status
    error: str | None = None  # one line, when status != 0


Replay = Callable[[Any], Outcome]


def is_int(x: Any) -> bool:
    """An int that is not a bool (JSON true is not a count)."""
    return isinstance(x, int) and not isinstance(x, bool)


def int_field(value: Any, where: str, low: int, high: int | None = None) -> int:
    """An int in [low, high], or a ScenarioError naming the field."""
    if not is_int(value) or value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ScenarioError(f"{where} must be an int {bound}, got {value!r}")
    return value


def request_id(entry: Any, where: str, ids: set[str]) -> str:
    """A request entry's id, a string no earlier entry took (added to `ids`)."""
    if not isinstance(entry, dict):
        raise ScenarioError(f"{where} must be an object")
    rid = entry.get("id")
    if not isinstance(rid, str) or rid in ids:
        raise ScenarioError(f"{where}.id missing, not a string or duplicated: {rid!r}")
    ids.add(rid)
    return rid


def token_ids(value: Any, where: str, high: int) -> list[int]:
    """A non-empty list of token ids in [0, high)."""
    if not isinstance(value, list) or not value or not all(is_int(t) and 0 <= t < high for t in value):
        raise ScenarioError(f"{where} must be a non-empty list of ints in [0, {high})")
    return value


def format_log(lines: list[dict[str, Any]]) -> str:
    """JSON lines, keys in the order each line was built (the oracles' format)."""
    return "".join(json.dumps(line) + "\n" for line in lines)


def load(path: str) -> Any:
    """A scenario file's JSON; unreadable files are invalid scenarios."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise ScenarioError(f"cannot read {path}: {exc}") from None


def name_of(path: str, scenario: Any) -> str:
    """The scenario's "name", else its file's stem."""
    name = scenario.get("name") if isinstance(scenario, dict) else None
    return name if isinstance(name, str) and name else Path(path).stem


def print_log(replay: Replay, path: str, out: TextIO, err: TextIO) -> int:
    """Print one scenario's log (what there is of it) and, when it stops early, the reason."""
    try:
        outcome = replay(load(path))
    except ScenarioError as exc:
        print(f"invalid scenario {path}: {exc}", file=err)
        return EXIT_INVALID
    out.write(outcome.log)
    if outcome.error is not None:
        print(f"{path}: {outcome.error}", file=err)
    return outcome.status


def write_batch(replay: Replay, outdir: str, paths: list[str], err: TextIO) -> int:
    """OUTDIR/<name>.jsonl for every scenario (what there is of the log) and <name>.err with the
    reason where it stops early or is invalid; the worst status."""
    folder = Path(outdir)
    folder.mkdir(parents=True, exist_ok=True)
    worst = 0
    for path in paths:
        name = Path(path).stem
        try:
            scenario = load(path)
            name = name_of(path, scenario)
            outcome = replay(scenario)
        except ScenarioError as exc:
            outcome = Outcome("", EXIT_INVALID, f"invalid scenario {path}: {exc}")
        for stale in (folder / f"{name}.jsonl", folder / f"{name}.err"):
            stale.unlink(missing_ok=True)
        if outcome.log or outcome.error is None:
            (folder / f"{name}.jsonl").write_text(outcome.log)
        if outcome.error is not None:
            (folder / f"{name}.err").write_text(outcome.error + "\n")
            print(f"{path}: {outcome.error}", file=err)
        worst = max(worst, outcome.status)
    return worst
