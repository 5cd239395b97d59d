"""Generator specs as workload names: 'gen:rate=5,requests=1000' or a .toml/.json config file."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pandas as pd

from .errors import TraceError
from .generate import generate_workload
from .spec import spec_from_dict

PREFIX = "gen:"
_ARRIVAL = {"process": str, "rate": float, "cv": float}
_TOP = {"requests": ("num_requests", int), "duration": ("duration_s", float), "seed": ("seed", int)}
_LENGTHS = {
    "prompt_mean": ("prompt", "mean"),
    "prompt_cv": ("prompt", "cv"),
    "output_mean": ("output", "mean"),
    "output_cv": ("output", "cv"),
}


def is_generator_spec(spec: str) -> bool:
    """Inline 'gen:...' strings and generator config files (.toml, .json; not .jsonl)."""
    return spec.startswith(PREFIX) or Path(spec).suffix in (".toml", ".json")


def parse_inline(text: str) -> dict[str, Any]:
    """'gen:process=gamma,rate=5,cv=2,requests=1000,prompt_mean=512' -> a WorkloadSpec dict."""
    cfg: dict[str, Any] = {"arrival": {}}
    lengths: dict[str, dict[str, Any]] = {}
    for item in filter(None, (p.strip() for p in text[len(PREFIX) :].split(","))):
        key, sep, value = item.partition("=")
        key = key.strip()
        try:
            if not sep:
                raise ValueError("expected key=value")
            if key in _ARRIVAL:
                cfg["arrival"][key] = _ARRIVAL[key](value)
            elif key in _TOP:
                name, kind = _TOP[key]
                cfg[name] = kind(value)
            elif key in _LENGTHS:
                which, param = _LENGTHS[key]
                lengths.setdefault(
                    which, {"dist": "lognormal", "mean": 512.0 if which == "prompt" else 128.0, "cv": 1.0}
                )[param] = float(value)
            else:
                raise ValueError(f"unknown key; use {sorted([*_ARRIVAL, *_TOP, *_LENGTHS])}")
        except ValueError as exc:
            raise TraceError(f"bad generator spec item {item!r}: {exc}", text, None, key) from None
    if "duration_s" in cfg:
        cfg.setdefault("num_requests", None)
    if lengths:
        cfg["classes"] = [dict(lengths)]
    return cfg


def load_generated(spec: str) -> pd.DataFrame:
    """Generate the workload a spec names; the source records the spec itself."""
    if spec.startswith(PREFIX):
        cfg = parse_inline(spec)
    else:
        try:
            text = Path(spec).read_text(encoding="utf-8")
            cfg = tomllib.loads(text) if spec.endswith(".toml") else json.loads(text)
        except (OSError, ValueError) as exc:
            raise TraceError(f"unreadable generator config: {exc}", spec) from None
        if not isinstance(cfg, dict):
            raise TraceError("a generator config is a table/object of WorkloadSpec fields", spec)
    df = generate_workload(spec_from_dict(cfg))
    df.attrs["source"] = spec
    return df
