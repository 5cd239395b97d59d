"""Trace files: the shipped samples by name, or a path, in a format given, by suffix or sniffed."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import pandas as pd

from .errors import TraceError
from .formats_csv import AZURE_COLUMNS, load_azure, load_burstgpt, load_csv
from .formats_jsonl import load_jsonl, load_mooncake
from .native import read_parquet_workload
from .reading import open_binary, read_csv_header

SHIPPED: dict[str, str] = {
    "azure-conv-2023": "AzureLLMInferenceTrace_conv.csv",
    "azure-code-2023": "AzureLLMInferenceTrace_code.csv",
    "mooncake-synthetic": "mooncake_synthetic_trace.jsonl",
}
DEFAULT_TRACE = "azure-conv-2023"

LOADERS: dict[str, Callable[..., pd.DataFrame]] = {
    "azure": load_azure,
    "mooncake": load_mooncake,
    "burstgpt": load_burstgpt,
    "csv": load_csv,
    "jsonl": load_jsonl,
    "parquet": lambda path: read_parquet_workload(path),
}


def shipped_path(name: str) -> Path:
    """Filesystem path of a shipped sample (package data under traces/data/)."""
    if name not in SHIPPED:
        raise TraceError(f"unknown shipped trace {name!r}; known: {sorted(SHIPPED)}", field="spec")
    return Path(str(resources.files("schedsim.traces") / "data" / SHIPPED[name]))


def sniff_format(path: Path) -> str:
    """Suffix first, then content: JSON objects vs. CSV headers of the known layouts."""
    suffixes = [s for s in path.suffixes if s != ".gz"]
    if suffixes and suffixes[-1] == ".parquet":
        return "parquet"
    with open_binary(path) as fh:
        first = b""
        for first in fh:
            if first.strip(b"\xef\xbb\xbf \t\r\n"):
                break
    if first.lstrip(b"\xef\xbb\xbf \t").startswith(b"{"):
        return "mooncake" if b'"input_length"' in first and b'"hash_ids"' in first else "jsonl"
    if suffixes and suffixes[-1] in (".jsonl", ".ndjson"):
        return "jsonl"
    header, _ = read_csv_header(path)
    if tuple(header) == AZURE_COLUMNS:
        return "azure"
    if {"Timestamp", "Request tokens", "Response tokens"} <= set(header):
        return "burstgpt"
    return "csv"


def load_file(spec: str | Path, *, format: str = "auto", **opts: object) -> pd.DataFrame:
    """A Workload from a shipped name or a path; `opts` go to the format's loader."""
    spec_s = str(spec)
    path = shipped_path(spec_s) if spec_s in SHIPPED else Path(spec_s)
    if spec_s not in SHIPPED and not path.exists():
        raise TraceError(
            f"no such file, and not a shipped trace ({', '.join(sorted(SHIPPED))})", spec_s, None, "spec"
        )
    fmt = sniff_format(path) if format == "auto" else format
    if fmt not in LOADERS:
        raise TraceError(f"unknown format {fmt!r}; known: auto, {', '.join(LOADERS)}", spec_s, None, "format")
    loader = LOADERS[fmt]
    params = inspect.signature(loader).parameters
    unknown = [k for k in opts if k not in params]
    if unknown:
        raise TraceError(f"option(s) {unknown} do not apply to the {fmt} format", spec_s, None, unknown[0])
    df = loader(path, **opts)
    if spec_s in SHIPPED:
        df.attrs["source"] = spec_s
    return df
