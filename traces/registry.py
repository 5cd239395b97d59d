"""`load_workload(spec)`: shipped sample names or paths, format by option, suffix or sniffing."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import pandas as pd

from ._io import open_binary, read_csv_header
from .errors import TraceError
from .formats_csv import AZURE_COLUMNS, load_azure, load_burstgpt, load_csv
from .formats_jsonl import load_jsonl, load_mooncake
from .genspec import is_generator_spec, load_generated
from .native import read_parquet_workload

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


def load_workload(spec: str | Path, *, format: str = "auto", **opts: object) -> pd.DataFrame:
    """A Workload from a shipped name, a path, or a generator spec; `opts` go to the loader.

    Generator specs: 'gen:rate=5,requests=1000[,process=gamma,cv=2,prompt_mean=..,seed=..]'
    or a .toml/.json file of WorkloadSpec fields (see generate.py).

    Common opts: skip_bad, sort, head, window=(start_s, end_s). CSV/JSONL: mapping, time_unit,
    block_size. BurstGPT: model, log_type.
    """
    spec_s = str(spec)
    if spec_s not in SHIPPED and format == "auto" and is_generator_spec(spec_s):
        if opts:
            raise TraceError(f"option(s) {sorted(opts)} do not apply to a generator spec", spec_s,
                             None, next(iter(opts)))
        return load_generated(spec_s)
    path = shipped_path(spec_s) if spec_s in SHIPPED else Path(spec_s)
    if spec_s not in SHIPPED and not path.exists():
        raise TraceError(f"no such file, and not a shipped trace ({', '.join(sorted(SHIPPED))})",
                         spec_s, None, "spec")
    fmt = sniff_format(path) if format == "auto" else format
    if fmt not in LOADERS:
        raise TraceError(f"unknown format {fmt!r}; known: auto, {', '.join(LOADERS)}", spec_s,
                         None, "format")
    loader = LOADERS[fmt]
    params = inspect.signature(loader).parameters
    unknown = [k for k in opts if k not in params]
    if unknown:
        raise TraceError(f"option(s) {unknown} do not apply to the {fmt} format", spec_s, None,
                         unknown[0])
    df = loader(path, **opts)
    if spec_s in SHIPPED:
        df.attrs["source"] = spec_s
    return df
