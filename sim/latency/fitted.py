"""Fitted whole-step model: step time = c0 + c1 P + c2 D + c3 sum(context) + c4 sum(context^2).

For users with end-to-end step timings but no operator profiles. Features of a step:
- prefill_tokens (P): new tokens of all prefill chunks
- decode_count (D): decode tokens (one per decoding request plus its draft tokens)
- sum_context: KV tokens attention reads, over all requests (context + new tokens)
- sum_context_sq: sum over prefill chunks of (context + n)^2 - context^2, the quadratic part of
  causal attention
Coefficients are fitted by non-negative least squares on relative error (each step counts the same
whatever its length), so the model stays monotone in every feature.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .base import StepShape

FEATURES = ("prefill_tokens", "decode_count", "sum_context", "sum_context_sq")


def step_features(shape: StepShape) -> tuple[float, float, float, float]:
    """The four features of one step (one pass of C-level sums over the decodes)."""
    d = len(shape.decodes) + shape.num_drafts
    return plain_features(shape.prefills, d, shape.decode_context + d)


def plain_features(prefills: list[tuple[int, int]], d: int, ctx: int) -> tuple[float, float, float, float]:
    """The four features from the prefill chunks, the decode tokens and the decodes' share of
    sum_context (what a draft-free step knows without a decode list)."""
    p = sq = 0
    for n, c in prefills:
        p += n
        ctx += c + n
        sq += (c + n) * (c + n) - c * c
    return float(p), float(d), float(ctx), float(sq)


def read_step_csv(path: str | Path) -> pd.DataFrame:
    """Measured steps: step_time_s or step_time_ms, prefill_tokens, decode_count[, sum_context,
    sum_context_sq]; bad rows raise with file, line and field."""
    path = Path(path)
    df = pd.read_csv(path)
    if "step_time_s" not in df.columns:
        if "step_time_ms" not in df.columns:
            raise ValueError(f"{path}: missing column 'step_time_s' (or 'step_time_ms')")
        df["step_time_s"] = pd.to_numeric(df["step_time_ms"], errors="coerce") * 1e-3
    for col in ("prefill_tokens", "decode_count"):
        if col not in df.columns:
            raise ValueError(f"{path}: missing column {col!r}")
    for col in ("sum_context", "sum_context_sq"):
        if col not in df.columns:
            df[col] = 0.0
    for col in ("step_time_s", *FEATURES):
        values = pd.to_numeric(df[col], errors="coerce")
        bad = values.isna() | (values < 0) | ((values <= 0) if col == "step_time_s" else False)
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise ValueError(
                f"{path}:{i + 2}: field {col!r} must be a number "
                f"{'> 0' if col == 'step_time_s' else '>= 0'}, got {df[col].iloc[i]!r}"
            )
        df[col] = values.astype(float)
    return df[["step_time_s", *FEATURES]]


def nonnegative_lstsq(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Least squares with x >= 0 (Lawson-Hanson active set)."""
    n = a.shape[1]
    x, passive = np.zeros(n), np.zeros(n, dtype=bool)
    for _ in range(3 * n):
        w = a.T @ (b - a @ x)
        if passive.all() or (w[~passive] <= 1e-12 * max(1.0, np.abs(w).max())).all():
            break
        passive[np.argmax(np.where(passive, -np.inf, w))] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            mask = passive & (z <= 0)
            alpha = np.min(x[mask] / (x[mask] - z[mask]))
            x = x + alpha * (z - x)
            passive &= x > 1e-15
    return x


def _design(df: pd.DataFrame) -> np.ndarray:
    return np.column_stack([np.ones(len(df))] + [df[f].to_numpy(dtype=float) for f in FEATURES])


def _fit(df: pd.DataFrame) -> np.ndarray:
    a, y = _design(df), df["step_time_s"].to_numpy(dtype=float)
    return nonnegative_lstsq(a / y[:, None], np.ones_like(y))


def _errors(coef: np.ndarray, df: pd.DataFrame) -> np.ndarray:
    y = df["step_time_s"].to_numpy(dtype=float)
    return np.abs(_design(df) @ coef - y) / y


def fit_step_model(df: pd.DataFrame, folds: int = 5, seed: int = 0, **meta: Any) -> dict[str, Any]:
    """A "fitted-step" calibration with in-sample and k-fold held-out relative error."""
    if len(df) < len(FEATURES) + 1:
        raise ValueError(f"need at least {len(FEATURES) + 1} measured steps, got {len(df)}")
    coef = _fit(df)
    order = np.random.default_rng(seed).permutation(len(df))
    held = []
    for k in range(min(folds, len(df))):
        test = order[k::folds]
        train = np.setdiff1d(order, test)
        if len(train) > len(FEATURES):
            held.append(_errors(_fit(df.iloc[train]), df.iloc[test]))
    cv = np.concatenate(held) if held else np.array([np.nan])
    fit = _errors(coef, df)
    return {
        "kind": "fitted-step",
        **meta,
        "num_steps": int(len(df)),
        "coefficients": dict(zip(("intercept_s", *FEATURES), map(float, coef), strict=True)),
        "fit_error": {"median_rel_err": float(np.median(fit)), "p90_rel_err": float(np.quantile(fit, 0.9))},
        "cv_error": {
            "folds": folds,
            "median_rel_err": float(np.nanmedian(cv)),
            "p90_rel_err": float(np.nanquantile(cv, 0.9)),
        },
    }


class FittedStepModel:
    """The five-coefficient whole-step model."""

    name = "fitted"

    def __init__(self, coefficients: dict[str, float], meta: dict[str, Any] | None = None) -> None:
        missing = [k for k in ("intercept_s", *FEATURES) if k not in coefficients]
        if missing:
            raise ValueError(f"fitted-step coefficients missing {missing}")
        self.coefficients = dict(coefficients)
        self._c = [float(coefficients[k]) for k in ("intercept_s", *FEATURES)]
        self.meta = meta or {}

    @classmethod
    def from_calibration(cls, cal: dict[str, Any]) -> FittedStepModel:
        """From a calibration dict written by fit_step_model / `schedsim calibrate --steps`."""
        return cls(cal["coefficients"], {k: v for k, v in cal.items() if k != "coefficients"})

    def step_time(self, shape: StepShape) -> float:
        """Seconds of one GPU step of this shape."""
        if not shape.prefills and not shape.decodes:
            return 0.0
        return self._time(*step_features(shape))

    def plain_step_time(self, prefills: list[tuple[int, int]], num_decodes: int, ctx_sum: int) -> float:
        """step_time of prefill chunks and draft-free decodes given by their count and context sum
        (the executor's path: no decode list)."""
        if not prefills and not num_decodes:
            return 0.0
        return self._time(*plain_features(prefills, num_decodes, ctx_sum + num_decodes))

    def _time(self, p: float, d: float, ctx: float, sq: float) -> float:
        """The fitted line at one step's features."""
        c0, c1, c2, c3, c4 = self._c
        return c0 + c1 * p + c2 * d + c3 * ctx + c4 * sq

    def describe(self) -> dict:
        """Coefficients and where they came from."""
        keep = ("_path", "source", "model", "gpu", "tp", "num_steps", "fit_error", "cv_error")
        return {
            "kind": self.name,
            "coefficients": self.coefficients,
            **{k.lstrip("_"): v for k, v in self.meta.items() if k in keep},
        }


def steps_frame(shapes: list[StepShape], times_s: list[float]) -> pd.DataFrame:
    """Measured steps as the table fit_step_model takes (e.g. from the real backend's runs)."""
    rows = [(t, *step_features(s)) for s, t in zip(shapes, times_s, strict=True)]
    return pd.DataFrame(rows, columns=["step_time_s", *FEATURES])
