"""`load_workload(spec)`: a shipped sample name, a trace file, or a generator spec."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .errors import TraceError
from .genspec import is_generator_spec, load_generated
from .sources import SHIPPED, load_file


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
            raise TraceError(
                f"option(s) {sorted(opts)} do not apply to a generator spec", spec_s, None, next(iter(opts))
            )
        return load_generated(spec_s)
    return load_file(spec_s, format=format, **opts)
