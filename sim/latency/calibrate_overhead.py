"""`schedsim calibrate --measurements`: fit one deployment's overhead terms to its own timings.

The deployment is one (model, GPU, TP, engine). Its kernel-time scale, collective latency, host CPU
terms and launch time start from the shipped fit (data/overhead_fit.json) and move as far as the
user's measurements pull them, the shipped values acting as priors; the calibration reports its
own k-fold held-out error and records what it was fitted for.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .engines import get_engine_profile, shipped_overhead_fit
from .overhead_fit import (
    Param,
    StepTable,
    family_of,
    fit,
    params_from_fit,
    predict_rows,
    step_table,
    subset,
    to_fit_file,
)
from .specs import get_gpu_spec, get_model_spec

CV_FOLDS = 5


def free_params(engine: str, gpu: str, tp: int) -> list[str]:
    """What one deployment's measurements can move: its GPU's kernel scale, its engine's host CPU
    terms and launch time, and (with TP) its collective latency and broadcast."""
    profile = get_engine_profile(engine)
    cls = profile.fitted_as
    names = [f"kernel_scale:{family_of(gpu)}", f"step:{cls}", f"req:{cls}", f"launch:{profile.launcher}"]
    if tp > 1:
        names += [f"alpha:{cls}", f"tp:{cls}"]
    return names


def start_params(engine: str, gpu: str, base: dict[str, Any] | None = None) -> list[Param]:
    """The calibration's priors: the base fit's values (default: the shipped fit)."""
    base = base if base is not None else shipped_overhead_fit()
    return params_from_fit(base, [get_engine_profile(engine).fitted_as], (family_of(gpu),))


def fit_deployment(
    df: pd.DataFrame, t: StepTable, params: list[Param], engine: str, gpu: str, tp: int
) -> np.ndarray:
    """The deployment's parameters fitted to these rows (every row weighted the same)."""
    return fit(
        df,
        t,
        params,
        free=free_params(engine, gpu, tp),
        theta0=np.array([p.mean for p in params]),
        by_source=False,
    )


def relative_errors(theta: np.ndarray, params: list[Param], df: pd.DataFrame, t: StepTable) -> np.ndarray:
    """Signed relative error predicted / measured - 1 of every row."""
    pred = predict_rows(theta, [p.name for p in params], t, len(df))
    return pred / (df.value.to_numpy(dtype=float) * 1e-3) - 1.0


def cross_validated(
    df: pd.DataFrame,
    t: StepTable,
    params: list[Param],
    engine: str,
    gpu: str,
    tp: int,
    folds: int = CV_FOLDS,
    seed: int = 0,
) -> np.ndarray:
    """Held-out signed errors: each row predicted by a fit on the other folds (NaN if too few)."""
    n = len(df)
    out = np.full(n, np.nan)
    if n < 2:
        return out
    order = np.random.default_rng(seed).permutation(n)
    k = min(folds, n)
    for f in range(k):
        test = np.sort(order[f::k])
        train = np.setdiff1d(np.arange(n), test)
        theta = fit_deployment(
            df.iloc[train].reset_index(drop=True), subset(t, train), params, engine, gpu, tp
        )
        out[test] = relative_errors(theta, params, df.iloc[test].reset_index(drop=True), subset(t, test))
    return out


def _stats(err: np.ndarray) -> dict[str, float]:
    err = err[np.isfinite(err)]
    if not len(err):
        return {"n": 0}
    return {
        "n": int(len(err)),
        "median_signed": float(np.median(err)),
        "median_abs": float(np.median(np.abs(err))),
        "p90_abs": float(np.quantile(np.abs(err), 0.9)),
    }


def calibrate_measurements(
    df: pd.DataFrame,
    model: str,
    gpu: str,
    tp: int,
    engine: str,
    base: dict[str, Any] | None = None,
    source: str = "",
) -> dict[str, Any]:
    """An "overhead-fit" calibration for one deployment from its measurements (read_measurements)."""
    params = start_params(engine, gpu, base)
    t = step_table(df)
    theta = fit_deployment(df, t, params, engine, gpu, tp)
    before = relative_errors(np.array([p.mean for p in params]), params, df, t)
    after = relative_errors(theta, params, df, t)
    cal = to_fit_file(theta, params, source=source)
    free = free_params(engine, gpu, tp)
    cls = get_engine_profile(engine).fitted_as
    cal["engines"] = {cls: cal["engines"].get(cls, {})}
    entry = next((v for k, v in cal["gpus"].items() if family_of(k) == family_of(gpu)), None)
    cal["gpus"] = {get_gpu_spec(gpu).name: entry} if entry else {}
    cal.update(
        {
            "model": get_model_spec(model).name,
            "gpu": get_gpu_spec(gpu).name,
            "tp": int(tp),
            "engine": engine,
            "num_measurements": int(len(df)),
            "free_parameters": free,
            "error_before": _stats(before),
            "fit_error": _stats(after),
            "cv_error": {
                "folds": min(CV_FOLDS, len(df)),
                **_stats(cross_validated(df, t, params, engine, gpu, tp)),
            },
        }
    )
    return cal
