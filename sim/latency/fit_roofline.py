"""Roofline efficiencies fitted per GPU to measured operator times (shipped in data/roofline_fit.json).

Three fits, each minimising squared log error (relative error, so 5 us kernels count as much as
50 ms ones): GEMM compute/memory efficiency, elementwise memory efficiency and the per-kernel
overhead from the per-operator profiles; all-reduce bandwidth efficiency and latency from the
network profiles; attention compute/memory efficiency from the attention profile (A30 only, shared
with the other GPUs, which have no attention measurements).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any

import numpy as np
import pandas as pd

from .profiles import Profiles, node_for_gpu
from .roofline import RooflineConfig, RooflineModel
from .specs import GpuSpec, get_gpu_spec, get_model_spec

# GPUs without their own measurements borrow the fit of a GPU with the same generation of SMs.
FIT_DONOR = {"h200": "h100-sxm", "a100-40gb": "a100-80gb"}
_BOUNDS = {
    "gemm_compute_eff": (0.05, 1.0),
    "gemm_memory_eff": (0.05, 1.0),
    "elementwise_memory_eff": (0.02, 1.0),
    "kernel_overhead_us": (0.0, 40.0),
    "gemm_overhead_us": (0.0, 40.0),
    "gemm_blend_p": (1.0, 12.0),
    "attn_compute_eff": (0.02, 1.0),
    "attn_memory_eff": (0.02, 1.0),
    "attn_overhead_us": (0.0, 100.0),
}


def _bounds(name: str) -> tuple[float, float]:
    return (0.02, 1.0) if name.startswith("op:") else _BOUNDS[name]


def _golden(f: Callable[[float], float], lo: float, hi: float, iters: int = 32) -> float:
    """Minimise a unimodal-ish scalar function on [lo, hi]."""
    g = (5**0.5 - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return (a + b) / 2


def coordinate_fit(
    loss: Callable[[dict[str, float]], float], start: dict[str, float], names: list[str], sweeps: int = 5
) -> dict[str, float]:
    """Coordinate descent with golden-section line searches inside _BOUNDS (numpy only)."""
    params = dict(start)
    for _ in range(sweeps):
        for name in names:
            lo, hi = _bounds(name)

            def along(v: float, n: str = name) -> float:
                """The loss with only parameter `n` moved to `v`."""
                return loss({**params, n: v})

            params[name] = _golden(along, lo, hi)
    return params


def operator_rows(profiles: Profiles, gpu: str) -> pd.DataFrame:
    """Measured per-operator rows of one GPU with each row's FLOPs, bytes and GEMM flag."""
    df = profiles.compute[profiles.compute.gpu == gpu]
    g = get_gpu_spec(gpu)
    parts = []
    for (model, tp), sub in df.groupby(["model", "tp"]):
        rl = RooflineModel(get_model_spec(model), g, int(tp))
        work = {t: rl.op_work(int(t)) for t in sub.num_tokens.unique()}
        w = [work[t][op] for t, op in zip(sub.num_tokens, sub.op, strict=True)]
        parts.append(sub.assign(flops=[x[0] for x in w], nbytes=[x[1] for x in w], gemm=[x[2] for x in w]))
    return pd.concat(parts, ignore_index=True)


class OperatorData:
    """Operator rows as arrays, so one evaluation of the fit's loss is a few numpy passes."""

    def __init__(self, rows: pd.DataFrame, gpu: GpuSpec) -> None:
        self.rows = rows
        self.flops = rows.flops.to_numpy(dtype=float)
        self.nbytes = rows.nbytes.to_numpy(dtype=float)
        self.gemm = rows.gemm.to_numpy(dtype=bool)
        self.ops = sorted(rows.op.unique())
        self.op_idx = rows.op.map({o: i for i, o in enumerate(self.ops)}).to_numpy()
        self.peak, self.bw = gpu.peak_tflops * 1e12, gpu.hbm_gbps * 1e9

    def predict(self, p: dict[str, float]) -> np.ndarray:
        """Roofline time of each row under parameters p ("op:<name>" = per-op memory efficiency)."""
        effs = np.array([p.get(f"op:{o}", p.get("elementwise_memory_eff", 0.5)) for o in self.ops])
        t_c = self.flops / (self.peak * p["gemm_compute_eff"])
        t_m = self.nbytes / (self.bw * p["gemm_memory_eff"])
        k = p.get("gemm_blend_p", 0.0)
        gemm = (t_c**k + t_m**k) ** (1.0 / k) if k else np.maximum(t_c, t_m)
        gemm = gemm + p.get("gemm_overhead_us", p["kernel_overhead_us"]) * 1e-6
        elem = self.nbytes / (self.bw * effs[self.op_idx]) + p["kernel_overhead_us"] * 1e-6
        return np.where(self.gemm, gemm, elem)


def _log_loss(pred: np.ndarray, meas: np.ndarray) -> float:
    return float(np.mean(np.log(pred / meas) ** 2))


def error_table(pred: np.ndarray, meas: np.ndarray, labels: pd.Series) -> dict[str, dict]:
    """Median / p90 relative error per label (operator)."""
    rel = pd.Series(np.abs(pred - meas) / meas, index=labels.index)
    return {
        str(k): {
            "median_rel_err": round(float(v.median()), 4),
            "p90_rel_err": round(float(v.quantile(0.9)), 4),
            "n": int(v.size),
        }
        for k, v in rel.groupby(labels)
    }


def fit_operators(profiles: Profiles, gpu: str) -> tuple[dict[str, Any], dict[str, dict]]:
    """GEMM/elementwise efficiencies and kernel overhead for one GPU, with per-operator error."""
    rows = operator_rows(profiles, gpu)
    rows = rows[rows.time_s > 0]
    g = get_gpu_spec(gpu)
    meas = rows.time_s.to_numpy()
    data = OperatorData(rows, g)
    elem_ops = sorted(rows.op[~rows.gemm.astype(bool)].unique())
    names = [
        "gemm_compute_eff",
        "gemm_memory_eff",
        "gemm_overhead_us",
        "gemm_blend_p",
        "kernel_overhead_us",
    ] + [f"op:{o}" for o in elem_ops]
    prior = RooflineConfig.from_gpu(g)
    start = {k: v for k, v in asdict(prior).items() if k in _BOUNDS}
    start["gemm_blend_p"] = 2.0
    start.update({f"op:{o}": prior.elementwise_memory_eff for o in elem_ops})
    params = coordinate_fit(lambda p: _log_loss(data.predict(p), meas), start, names)
    errors = error_table(data.predict(params), meas, rows.op)
    op_eff = {k[3:]: params.pop(k) for k in list(params) if k.startswith("op:")}
    if op_eff:  # kernels never measured (KV-cache write) get the typical elementwise efficiency
        params["elementwise_memory_eff"] = float(np.median(list(op_eff.values())))
    fitted: dict[str, Any] = {
        k: v
        for k, v in params.items()
        if k
        in (
            "gemm_compute_eff",
            "gemm_memory_eff",
            "gemm_overhead_us",
            "gemm_blend_p",
            "kernel_overhead_us",
            "elementwise_memory_eff",
        )
    }
    fitted["op_memory_eff"] = op_eff  # per elementwise operator
    return fitted, errors


def fit_all_reduce(profiles: Profiles, gpu: str) -> tuple[dict[str, float], dict[str, dict]] | None:
    """Ring all-reduce bandwidth efficiency and latency from the GPU's NVLink node profile."""
    node, df = node_for_gpu(gpu), profiles.network
    if node is None or df.empty:
        return None
    sub = df[(df.node == node) & (df.collective == "all_reduce")]
    if sub.empty:
        return None
    g = get_gpu_spec(gpu)
    p = sub.num_workers.to_numpy()
    x = 2 * (p - 1) / p * sub.size_bytes.to_numpy() / (g.nvlink_gbps * 1e9 / 2)
    y = sub.time_s.to_numpy()
    # relative least squares: t = x / eff + latency, weighted by 1 / t
    a = np.stack([x / y, 1 / y], axis=1)
    (inv_eff, lat), *_ = np.linalg.lstsq(a, np.ones_like(y), rcond=None)
    params = {
        "comm_bw_eff": float(min(1.0, max(0.01, 1 / inv_eff))),
        "comm_latency_us": float(max(0.0, lat) * 1e6),
    }
    pred = x / params["comm_bw_eff"] + params["comm_latency_us"] * 1e-6
    return params, error_table(pred, y, sub.num_workers.map(lambda w: f"all_reduce_tp{w}"))


def attention_rows(profiles: Profiles) -> pd.DataFrame:
    """Measured attention kernels (prefill and decode) with their gpu/model/shape."""
    df = profiles.attention
    if df.empty:
        return df
    return df[df.op.isin(["attn_prefill", "attn_decode"]) & (df.time_s > 0)]


def fit_attention(profiles: Profiles, base: dict[str, dict]) -> tuple[dict, dict] | None:
    """Attention efficiencies from the attention profile (per GPU, with that GPU's overhead)."""
    rows = attention_rows(profiles)
    if rows.empty:
        return None
    gpu = str(rows.gpu.iloc[0])
    rows = rows[rows.gpu == gpu]
    model = get_model_spec(str(rows.model.iloc[0]))
    cfg = replace(
        RooflineConfig.from_gpu(get_gpu_spec(gpu)),
        **{k: v for k, v in base.get(gpu, {}).items() if k in _BOUNDS},
    )

    rl = RooflineModel(model, get_gpu_spec(gpu), int(rows.tp.iloc[0]), cfg)
    work = np.array(
        [
            rl.prefill_attention_work([(int(c), int(k))])
            if ph == "prefill"
            else rl.decode_attention_work([(int(k), 0)] * int(b), 0)
            for ph, b, c, k in zip(
                rows.phase, rows.batch_size, rows.chunk_tokens, rows.kv_tokens, strict=True
            )
        ]
    )
    peak, bw = rl.peak_flops, rl.hbm_bandwidth

    def predict(p: dict[str, float]) -> np.ndarray:
        return (
            np.maximum(work[:, 0] / (peak * p["attn_compute_eff"]), work[:, 1] / (bw * p["attn_memory_eff"]))
            + p["attn_overhead_us"] * 1e-6
        )

    meas = rows.time_s.to_numpy()
    names = ["attn_compute_eff", "attn_memory_eff", "attn_overhead_us"]
    params = coordinate_fit(
        lambda p: _log_loss(predict(p), meas), {n: getattr(cfg, n) for n in names}, names, sweeps=4
    )
    return {"gpu": gpu, "model": model.name, **params}, error_table(predict(params), meas, rows.op)
