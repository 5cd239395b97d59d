"""How wrong are the overhead-term models on measurements they did not see (docs/accuracy.md).

- in-sample: one fit on every source;
- leave-one-source-out (LOSO): each source predicted by a fit on all the others;
- half-calibrated: each source's deployments (model, GPU, TP, engine) split in half at random; one
  half calibrates its deployment (`calibrate_overhead`, starting from the LOSO fit without that
  source, as a user of a new engine would), the other half is predicted.
Errors are signed, predicted / measured - 1, per row (one published figure).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .calibrate_overhead import fit_deployment, start_params
from .engines import get_engine_profile
from .measurements import kv_fits, shipped_sources
from .overhead_fit import (
    CLASS_PRIORS,
    Param,
    StepTable,
    default_params,
    family_of,
    fit,
    predict_rows,
    step_table,
    subset,
    to_fit_file,
)


def evaluation_rows(df: pd.DataFrame | None = None) -> pd.DataFrame:
    """The shipped measurements a static expansion can predict (final KV fits the pool)."""
    df = shipped_sources() if df is None else df
    return df[[kv_fits(r) for r in df.itertuples(index=False)]].reset_index(drop=True)


def all_params(df: pd.DataFrame) -> list[Param]:
    """Priors for every engine class and GPU family in these rows."""
    classes = sorted({get_engine_profile(e).fitted_as for e in df.engine_profile})
    return default_params(classes, tuple(sorted({family_of(g) for g in df.gpu})))


def _predict(theta: np.ndarray, params: list[Param], t: StepTable, n: int) -> np.ndarray:
    return predict_rows(theta, [p.name for p in params], t, n)


def in_sample(df: pd.DataFrame, t: StepTable, params: list[Param]) -> tuple[np.ndarray, np.ndarray]:
    """(fitted parameters, prediction of every row in s) with one fit on everything."""
    theta = fit(df, t, params)
    return theta, _predict(theta, params, t, len(df))


def leave_one_source_out(
    df: pd.DataFrame, t: StepTable, params: list[Param]
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Prediction of every row by a fit without its source; the fits by held-out source."""
    pred = np.full(len(df), np.nan)
    thetas = {}
    for src in sorted(df.source.unique()):
        train = np.flatnonzero(df.source.to_numpy() != src)
        test = np.flatnonzero(df.source.to_numpy() == src)
        theta = fit(df.iloc[train].reset_index(drop=True), subset(t, train), params)
        thetas[src] = theta
        pred[test] = _predict(theta, params, subset(t, test), len(test))
    return pred, thetas


def half_calibrated(
    df: pd.DataFrame, t: StepTable, params: list[Param], loso: dict[str, np.ndarray], seed: int = 0
) -> np.ndarray:
    """Prediction of the test half of every deployment after calibrating on its other half."""
    rng = np.random.default_rng(seed)
    pred = np.full(len(df), np.nan)
    keys = ["source", "model", "gpu", "tp", "engine_profile"]
    for (src, _, gpu, tp, engine), group in df.groupby(keys, sort=True):
        idx = group.index.to_numpy().copy()
        rng.shuffle(idx)
        cal, test = np.sort(idx[: len(idx) // 2]), np.sort(idx[len(idx) // 2 :])
        base = to_fit_file(loso[src], params, source=f"LOSO without {src}")
        start = start_params(engine, gpu, base)
        if len(cal):
            theta = fit_deployment(
                df.loc[cal].reset_index(drop=True), subset(t, cal), start, engine, gpu, int(tp)
            )
        else:
            theta = np.array([p.mean for p in start])
        pred[test] = predict_rows(theta, [p.name for p in start], subset(t, test), len(test))
    return pred


def summarize(points: pd.DataFrame, by: list[str], col: str = "err") -> pd.DataFrame:
    """n, median signed, median absolute and p90 absolute error per group."""
    p = points.dropna(subset=[col])
    g = p.groupby(by)[col]
    return pd.DataFrame(
        {
            "n": g.size(),
            "median_signed": g.median(),
            "median_abs": g.apply(lambda s: s.abs().median()),
            "p90_abs": g.apply(lambda s: s.abs().quantile(0.9)),
        }
    ).reset_index()


def evaluate(df: pd.DataFrame | None = None, seed: int = 0) -> dict[str, Any]:
    """Every evaluation at once: the rows with their predictions (ms) and the fits."""
    df = evaluation_rows(df)
    t = step_table(df)
    params = all_params(df)
    theta, pred_in = in_sample(df, t, params)
    pred_loso, thetas = leave_one_source_out(df, t, params)
    pred_half = half_calibrated(df, t, params, thetas, seed)
    out = df.copy()
    out["pred_in_ms"], out["pred_loso_ms"], out["pred_half_ms"] = (
        pred_in * 1e3,
        pred_loso * 1e3,
        pred_half * 1e3,
    )
    return {"points": out, "params": params, "theta": theta, "loso": thetas, "steps": t}


def shipped_fit_file(df: pd.DataFrame | None = None) -> dict[str, Any]:
    """The fit on every shipped source (data/overhead_fit.json), with the runtime profile "vllm":
    the fitted vLLM all-reduce latency, the CPU-cost model's own phases, the broadcast estimate."""
    df = evaluation_rows(df)
    t = step_table(df)
    params = all_params(df)
    theta, pred = in_sample(df, t, params)
    out = to_fit_file(
        theta,
        params,
        source="every source in data/measurements (in-sample fit; bench/latency_fit_overheads.py)",
    )
    out["engines"]["vllm"] = {
        "allreduce_latency_us": out["engines"]["vllm-v0-graph"]["allreduce_latency_us"],
        "tp_broadcast_us": CLASS_PRIORS["vllm"]["tp"][0],
    }
    points = df.assign(err=pred * 1e3 / df.value - 1)
    out["fit_error"] = {
        r.source: {
            "n": int(r.n),
            "median_signed": round(float(r.median_signed), 4),
            "median_abs": round(float(r.median_abs), 4),
        }
        for r in summarize(points, ["source"]).itertuples(index=False)
    }
    return out
