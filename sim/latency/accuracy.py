"""How wrong are the latency models? Held-out errors on the measured profiles, as tidy frames."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .fit_roofline import OperatorData, fit_operators, operator_rows
from .interp import Curve
from .profiles import Profiles
from .specs import get_gpu_spec

LAYER_OPS = (
    "input_layernorm",
    "attn_pre_proj",
    "attn_rope",
    "attn_post_proj",
    "post_attention_layernorm",
    "mlp_up_proj",
    "mlp_act",
    "mlp_down_proj",
    "add",
)


def _summary(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Median / p90 relative error and count per group."""
    g = df.groupby(by)["rel_err"]
    return pd.DataFrame(
        {"median_rel_err": g.median(), "p90_rel_err": g.quantile(0.9), "n": g.size()}
    ).reset_index()


def _layer_rows(points: pd.DataFrame) -> pd.DataFrame:
    """Whole-layer rows: sum of the layer's operators at each held-out point (all ops present)."""
    keys = ["gpu", "model", "tp", "num_tokens"]
    sub = points[points.op.isin(LAYER_OPS)]
    full = sub.groupby(keys).op.transform("size") == len(LAYER_OPS)
    layer = sub[full].groupby(keys, as_index=False)[["time_s", "pred_s"]].sum()
    layer["op"] = "whole_layer"
    layer["rel_err"] = (layer.pred_s - layer.time_s).abs() / layer.time_s
    return layer


def interpolation_holdout(profiles: Profiles, stride: int = 2) -> pd.DataFrame:
    """Table model: drop every `stride`-th interior grid point, interpolate it from the rest.

    One row per held-out (gpu, model, tp, op, num_tokens) plus whole-layer rows.
    """
    rows = []
    for (gpu, model, tp, op), g in profiles.compute.groupby(["gpu", "model", "tp", "op"]):
        g = g.sort_values("num_tokens")
        xs, ys = g.num_tokens.to_numpy(), g.time_s.to_numpy()
        test = np.zeros(len(xs), dtype=bool)
        test[1:-1:stride] = True  # keep both ends so nothing is extrapolated
        if not test.any():
            continue
        curve = Curve(xs[~test], ys[~test], warn=False)
        for x, y in zip(xs[test], ys[test], strict=True):
            rows.append((gpu, model, tp, op, x, y, curve(x)))
    points = pd.DataFrame(rows, columns=["gpu", "model", "tp", "op", "num_tokens", "time_s", "pred_s"])
    points["rel_err"] = (points.pred_s - points.time_s).abs() / points.time_s
    return pd.concat([points, _layer_rows(points)], ignore_index=True)


def roofline_leave_one_model_out(profiles: Profiles, gpu: str) -> pd.DataFrame:
    """Fitted roofline: fit on every other model of this GPU, predict the held-out model."""
    rows = operator_rows(profiles, gpu)
    rows = rows[rows.time_s > 0]
    out = []
    for model in sorted(rows.model.unique()):
        train = Profiles(
            profiles.compute[(profiles.compute.gpu == gpu) & (profiles.compute.model != model)],
            pd.DataFrame(),
            pd.DataFrame(),
        )
        if train.compute.empty:
            continue
        params, _ = fit_operators(train, gpu)
        flat = {k: v for k, v in params.items() if k != "op_memory_eff"}
        flat.update({f"op:{k}": v for k, v in params["op_memory_eff"].items()})
        test = rows[rows.model == model].copy()
        test["pred_s"] = OperatorData(test, get_gpu_spec(gpu)).predict(flat)
        out.append(test[["gpu", "model", "tp", "op", "num_tokens", "time_s", "pred_s"]])
    points = pd.concat(out, ignore_index=True)
    points["rel_err"] = (points.pred_s - points.time_s).abs() / points.time_s
    return pd.concat([points, _layer_rows(points)], ignore_index=True)


def summarize_errors(points: pd.DataFrame) -> pd.DataFrame:
    """Median / p90 relative error per GPU and operator (whole_layer included)."""
    return _summary(points, ["gpu", "op"])
