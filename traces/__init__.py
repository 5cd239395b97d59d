"""schedsim.traces: the Workload table, trace loaders, generators and shipped samples.

Imports nothing of schedsim's: a Workload is a pandas DataFrame (schema in `schema.py`).
"""

from .arrivals import ArrivalSpec, arrival_times
from .errors import SkippedRows, TraceError, TraceWarning
from .formats_csv import load_azure, load_burstgpt, load_csv
from .formats_jsonl import load_jsonl, load_mooncake
from .generate import generate_workload
from .lengths import LengthSpec
from .native import write_workload
from .prefix import block_hashes_at, prefix_sharing
from .registry import load_workload
from .schema import (
    ATTR_PREFIX_BLOCK_SIZE,
    ATTR_SOURCE,
    OPTIONAL_COLUMNS,
    REQUIRED_COLUMNS,
)
from .sources import DEFAULT_TRACE, SHIPPED, shipped_path, sniff_format
from .spec import ClassSpec, WorkloadSpec, spec_from_dict
from .stats import TraceStats, plot_workload, trace_stats
from .transforms import (
    cap_tokens,
    concat,
    filter_rows,
    head,
    mean_rate,
    sample,
    scale_rate,
    time_scale,
    window,
)
from .validate import normalize, validate_workload, with_defaults

__all__ = [
    "ATTR_PREFIX_BLOCK_SIZE",
    "ATTR_SOURCE",
    "DEFAULT_TRACE",
    "OPTIONAL_COLUMNS",
    "REQUIRED_COLUMNS",
    "SHIPPED",
    "ArrivalSpec",
    "ClassSpec",
    "LengthSpec",
    "SkippedRows",
    "TraceError",
    "TraceStats",
    "TraceWarning",
    "WorkloadSpec",
    "arrival_times",
    "block_hashes_at",
    "cap_tokens",
    "concat",
    "filter_rows",
    "generate_workload",
    "head",
    "load_azure",
    "load_burstgpt",
    "load_csv",
    "load_jsonl",
    "load_mooncake",
    "load_workload",
    "mean_rate",
    "normalize",
    "plot_workload",
    "prefix_sharing",
    "sample",
    "scale_rate",
    "shipped_path",
    "sniff_format",
    "spec_from_dict",
    "time_scale",
    "trace_stats",
    "validate_workload",
    "window",
    "with_defaults",
    "write_workload",
]
