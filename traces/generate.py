"""Synthetic Workloads: a seeded mix of request classes, some of them multi-turn sessions.

Each arrival event picks a class by weight. A single-turn class emits one request; a session
class starts a session whose turn k (k >= 1) arrives a think time after turn k-1 and whose
prompt is the class's shared system prompt, then every earlier user message and reply, then the
new user message, so later turns extend earlier prompts exactly (prefix sharing). Open loop:
think times run from the previous arrival, since replies' durations are the simulator's business.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .arrivals import arrival_times
from .sessions import build_requests
from .spec import WorkloadSpec
from .validate import normalize, validate_workload


def generate_workload(spec: WorkloadSpec) -> pd.DataFrame:
    """Draw the workload: the requests of the duration, or the first `num_requests` of them."""
    if spec.num_requests is None:
        df, _ = _draw(spec, None)
        df = df[df["arrival_time"] < spec.duration_s]
    else:
        df = _first_requests(spec, spec.num_requests)
    df = df.reset_index(drop=True)
    df["arrival_time"] -= df["arrival_time"].iloc[0] if len(df) else 0.0
    df.attrs = {"source": f"generate(seed={spec.seed})", "generator": _describe(spec)}
    if "prompt_block_hashes" in df.columns:
        df.attrs["prefix_block_size"] = spec.block_size
    return validate_workload(normalize(df))


def _first_requests(spec: WorkloadSpec, n: int) -> pd.DataFrame:
    """The first n requests; grows the number of arrival events until the target is met."""
    mean_turns = np.average(
        [c.turns.sample(256, np.random.default_rng(0)).mean() if c.turns else 1.0 for c in spec.classes],
        weights=[c.weight for c in spec.classes],
    )
    events = int(n / mean_turns) + 16
    while True:
        df, t = _draw(spec, events)
        if len(df) >= n and df["arrival_time"].iloc[n - 1] <= t[-1]:
            return df.head(n)
        events = int(events * 1.5) + 16


def _draw(spec: WorkloadSpec, events: int | None) -> tuple[pd.DataFrame, np.ndarray]:
    """Requests of `events` arrival events (or of the spec's duration), from the spec's seed."""
    rng = np.random.default_rng(spec.seed)
    t = arrival_times(spec.arrival, rng, n=events, duration=spec.duration_s)
    return build_requests(spec, t, rng), t


def _describe(spec: WorkloadSpec) -> str:
    """A compact provenance string (attrs must stay plain data)."""
    a = spec.arrival
    return f"{a.process}(rate={a.rate:g}, cv={a.cv:g}) x " + ", ".join(
        f"{c.name}:{c.weight:g}" for c in spec.classes
    )
