"""Fit the overhead terms to measured latencies: robust least squares with physical priors.

Every measurement becomes its steps (`measurements.row_steps`); a step's predicted time is what
OverheadModel gives plus, for the synchronous engines the sources measured, the host CPU phases:

    step = max(g x (B - AR_B) + n_coll x alpha_p + bandwidth + sampler,  eager x L x launch x host)
         + host x (step_us + per_request_us x requests + [tp > 1] tp_broadcast_us
                   + 0.02 us x tokens) / num_scheduler_steps

Parameters (PARAMS): per GPU family the kernel-time scale g and the host speed; shared across
engines the growth of collective latency with TP and the per-layer launch time of each launcher;
per engine class the all-reduce latency and the three host CPU terms. Each has a prior (mean, sd,
bounds) with its source; the fit minimises soft-L1 of log(predicted / measured), every source
weighted equally, plus weak Gaussian prior terms, so a parameter no data constrains stays at its
prior. numpy only: a bounded Levenberg-Marquardt on a forward-difference Jacobian.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .engines import get_engine_profile
from .factory import make_latency_model
from .measurements import row_steps
from .overhead import SAMPLER_KERNELS, SAMPLER_PASSES
from .specs import get_gpu_spec, get_model_spec

FAMILIES = {"a100-80gb": "a100", "a100-40gb": "a100", "h100-sxm": "h100", "h200": "h100"}
# name: (prior mean, prior sd, lower bound, upper bound, where the prior comes from); times in us
SHARED_PRIORS: dict[str, tuple[float, float, float, float, str]] = {
    "kernel_scale:a100": (1.0, 0.15, 0.5, 2.0, "GPU models built on measured kernels (Vidur profiles)"),
    "kernel_scale:h100": (1.0, 0.15, 0.5, 2.0, "GPU models built on measured kernels (Vidur profiles)"),
    "host_speed:a100": (1.0, 0.3, 0.3, 3.0, "no prior knowledge of A100 hosts vs DGX-H100 hosts"),
    "allreduce_growth": (0.3, 0.3, 0.0, 2.0, "NCCL latency model: ring 2(p-1) steps, tree log p"),
    "launch:python": (
        300.0,
        200.0,
        0.0,
        3000.0,
        "vLLM V0 eager decode plateau (~12-15 kernels per layer x PyTorch dispatch)",
    ),
    "launch:cpp": (20.0, 20.0, 0.0, 3000.0, "C++ enqueue of a layer's kernels (TensorRT, TurboMind)"),
}
# per engine class: alpha (all-reduce latency at TP 2), step, req, tp (host CPU per step, per
# request per step, broadcast per step with TP workers)
CLASS_PRIORS: dict[str, dict[str, tuple[float, float, float, float, str]]] = {
    "vllm-v0-eager": {
        "alpha": (
            20.0,
            15.0,
            0.0,
            200.0,
            "NCCL small-message all-reduce on NVLink via torch.distributed (Vidur NCCL profiles: 20-35 us)",
        ),
        "step": (2000.0, 1500.0, 0.0, 50000.0, "vLLM RFC #6801: ~20 ms between steps at batch 200"),
        "req": (20.0, 20.0, 0.0, 2000.0, "CPU-cost model per-request defaults (~15 us)"),
        "tp": (1000.0, 1000.0, 0.0, 50000.0, "vLLM V0 Ray/torch.distributed metadata broadcast"),
    },
    "vllm-v0-graph": {
        "alpha": (
            8.0,
            8.0,
            0.0,
            200.0,
            "vLLM custom all-reduce: 4.4-4.9 us at <= 8 tokens (BLIS kernel profiles, vLLM 0.14, H100)",
        ),
        "step": (1000.0, 1000.0, 0.0, 50000.0, "vLLM v0.6.0 blog: CPU ~29% of an H100 Llama-3-8B step"),
        "req": (15.0, 15.0, 0.0, 2000.0, "CPU-cost model per-request defaults; BLIS 4.4 us/request"),
        "tp": (500.0, 500.0, 0.0, 50000.0, "vLLM V0 broadcast_tensor_dict of the step's metadata"),
    },
    "trtllm-python": {
        "alpha": (10.0, 8.0, 0.0, 200.0, "TensorRT-LLM all-reduce plugin (one-shot / two-shot)"),
        "step": (1000.0, 1000.0, 0.0, 50000.0, "Python generation loop around TensorRT"),
        "req": (5.0, 5.0, 0.0, 2000.0, "C++ runtime per request"),
        "tp": (100.0, 100.0, 0.0, 50000.0, "MPI rank synchronisation per step"),
    },
    "vllm": {
        "alpha": (
            8.0,
            8.0,
            0.0,
            200.0,
            "vLLM custom all-reduce: 4.4-4.9 us at <= 8 tokens (BLIS kernel profiles, vLLM 0.14, H100)",
        ),
        "step": (165.0, 165.0, 0.0, 50000.0, "CPU-cost model defaults (vLLM V1, docs/latency.md)"),
        "req": (15.0, 15.0, 0.0, 2000.0, "CPU-cost model defaults (vLLM V1, docs/latency.md)"),
        "tp": (
            100.0,
            100.0,
            0.0,
            50000.0,
            "estimate: one pickled SchedulerOutput through vLLM V1's "
            "shared-memory broadcast queue (not measured)",
        ),
    },
    "trtllm-cpp": {
        "alpha": (10.0, 8.0, 0.0, 200.0, "TensorRT-LLM plugin / TurboMind custom all-reduce"),
        "step": (100.0, 100.0, 0.0, 50000.0, "C++ generation loop"),
        "req": (3.0, 5.0, 0.0, 2000.0, "C++ runtime per request"),
        "tp": (50.0, 50.0, 0.0, 50000.0, "C++ rank synchronisation per step"),
    },
}
PRIOR_WEIGHT = 0.05  # weight of one prior sd against one source's worth of log-error
SOFT_L1_SCALE = 0.05  # log-error where the loss turns from quadratic to linear (~5 %)


@dataclass(frozen=True)
class Param:
    """One fitted parameter with its prior."""

    name: str
    mean: float
    sd: float
    lo: float
    hi: float
    source: str


def family_of(gpu: str) -> str:
    """The GPU family whose kernel scale and host speed a GPU shares (itself if none)."""
    name = get_gpu_spec(gpu).name
    return FAMILIES.get(name, name)


def default_params(classes: list[str], families: tuple[str, ...] = ()) -> list[Param]:
    """The shared parameters and those of each engine class, at their priors."""
    out = [Param(k, *v) for k, v in SHARED_PRIORS.items()]
    for fam in families:
        if f"kernel_scale:{fam}" not in SHARED_PRIORS:
            out.append(Param(f"kernel_scale:{fam}", *SHARED_PRIORS["kernel_scale:h100"]))
    for cls in classes:
        for key, v in CLASS_PRIORS.get(cls, CLASS_PRIORS["vllm-v0-graph"]).items():
            out.append(Param(f"{key}:{cls}", *v))
    return out


# ---- the step table ---------------------------------------------------------------------------
@dataclass
class StepTable:
    """Everything the overhead terms need about every step of a set of measurements (numpy)."""

    row: np.ndarray
    weight: np.ndarray
    base: np.ndarray  # the bare GPU model's step time (s)
    ar_base: np.ndarray  # its all-reduce part (s)
    n_coll: np.ndarray  # collectives per step (2 L + 1 with TP, else 0)
    bandwidth: np.ndarray  # their link-bandwidth time (s)
    sampler: np.ndarray  # sampler kernels (s)
    layers: np.ndarray
    tokens: np.ndarray
    reqs: np.ndarray
    tp: np.ndarray
    eager: np.ndarray
    family: list[str]
    launcher: list[str]
    cls: list[str]
    nsteps: np.ndarray
    phase: list[str]


_MODELS: dict[tuple[str, str, int], Any] = {}


def bare_model(model: str, gpu: str, tp: int) -> Any:
    """The GPU model the overhead terms sit on (cached)."""
    key = (model, gpu, tp)
    if key not in _MODELS:
        _MODELS[key] = make_latency_model(model, gpu, tp, engine="none")
    return _MODELS[key]


def step_table(df: pd.DataFrame) -> StepTable:
    """The steps of every row of a measurement table."""
    cols: dict[str, list[Any]] = {k: [] for k in StepTable.__dataclass_fields__}
    for idx, r in enumerate(df.itertuples(index=False)):
        inner = bare_model(r.model, r.gpu, int(r.tp))
        rl = inner if not hasattr(inner, "roofline") else inner.roofline
        m, p = get_model_spec(r.model), int(r.tp)
        profile = get_engine_profile(r.engine_profile)
        for s in row_steps(r):
            shape = s.shape
            drafts = sum(k for _, k in shape.decodes)
            sampled = len(shape.prefills) + len(shape.decodes) + drafts
            cols["row"].append(idx)
            cols["weight"].append(s.weight)
            cols["base"].append(inner.step_time(shape))
            cols["ar_base"].append(inner.collective_time(s.tokens))
            cols["n_coll"].append(2 * m.num_layers + 1 if p > 1 else 0)
            cols["bandwidth"].append(
                2 * m.num_layers * rl.all_reduce_bandwidth(s.tokens * m.hidden_size * m.dtype_bytes)
                + rl.all_reduce_bandwidth(sampled * m.vocab_size * m.dtype_bytes) / 2
            )
            cols["sampler"].append(
                SAMPLER_KERNELS * rl.config.kernel_overhead_us * 1e-6
                + SAMPLER_PASSES
                * sampled
                * m.vocab_size
                * 4
                / (rl.gpu.hbm_gbps * 1e9 * rl.config.elementwise_memory_eff)
            )
            cols["layers"].append(m.num_layers)
            cols["tokens"].append(s.tokens)
            cols["reqs"].append(s.reqs)
            cols["tp"].append(p)
            cols["eager"].append(profile.eager(s.tokens, not shape.prefills and not drafts))
            cols["family"].append(family_of(r.gpu))
            cols["launcher"].append(profile.launcher)
            cols["cls"].append(profile.fitted_as)
            cols["nsteps"].append(profile.num_scheduler_steps)
            cols["phase"].append(s.phase)
    arrays: dict[str, Any] = {
        k: (v if k in ("family", "launcher", "cls", "phase") else np.asarray(v, dtype=float))
        for k, v in cols.items()
    }
    arrays["row"] = np.asarray(cols["row"], dtype=int)
    return StepTable(**arrays)


def subset(t: StepTable, rows: np.ndarray) -> StepTable:
    """The steps of the given rows, renumbered 0..len(rows)-1."""
    remap = -np.ones(int(t.row.max()) + 1 if len(t.row) else 0, dtype=int)
    remap[rows] = np.arange(len(rows))
    keep = remap[t.row] >= 0
    out: dict[str, Any] = {}
    for k in StepTable.__dataclass_fields__:
        v = getattr(t, k)
        out[k] = v[keep] if isinstance(v, np.ndarray) else [x for x, kp in zip(v, keep, strict=True) if kp]
    out["row"] = remap[t.row[keep]]
    return StepTable(**out)


# ---- the model --------------------------------------------------------------------------------
def _lookup(names: list[str], theta: np.ndarray, keys: list[str], default: float) -> np.ndarray:
    index = {n: i for i, n in enumerate(names)}
    return np.array([theta[index[k]] if k in index else default for k in keys])


def step_times(theta: np.ndarray, names: list[str], t: StepTable) -> np.ndarray:
    """Predicted seconds of every step (synchronous engine: GPU step + host CPU phases)."""
    uniq = {k: sorted(set(v)) for k, v in (("family", t.family), ("launcher", t.launcher), ("cls", t.cls))}

    def per(kind: str, prefix: str, default: float) -> np.ndarray:
        keys = [f"{prefix}:{x}" for x in uniq[kind]]
        vals = dict(zip(uniq[kind], _lookup(names, theta, keys, default), strict=True))
        return np.array([vals[x] for x in getattr(t, kind)])

    g = per("family", "kernel_scale", 1.0)
    host = per("family", "host_speed", 1.0)
    growth = _lookup(names, theta, ["allreduce_growth"], SHARED_PRIORS["allreduce_growth"][0])[0]
    alpha = per("cls", "alpha", 8.0) * 1e-6 * (1.0 + growth * np.log2(np.maximum(t.tp, 2) / 2))
    gpu = g * (t.base - t.ar_base) + t.n_coll * alpha + t.bandwidth + t.sampler
    launch = np.where(t.eager > 0, t.layers * per("launcher", "launch", 300.0) * 1e-6 * host, 0.0)
    cpu = (
        host
        * (
            per("cls", "step", 0.0)
            + per("cls", "req", 0.0) * t.reqs
            + np.where(t.tp > 1, per("cls", "tp", 0.0), 0.0)
            + 0.02 * t.tokens
        )
        * 1e-6
    )
    return np.maximum(gpu, launch) + cpu / t.nsteps


def predict_rows(theta: np.ndarray, names: list[str], t: StepTable, n_rows: int) -> np.ndarray:
    """Predicted value of every row, seconds."""
    return np.bincount(t.row, weights=t.weight * step_times(theta, names, t), minlength=n_rows)


# ---- the solver -------------------------------------------------------------------------------
def _soft_l1(r: np.ndarray) -> np.ndarray:
    """Residuals whose squares are the soft-L1 loss (quadratic near 0, linear in the tails)."""
    z = (r / SOFT_L1_SCALE) ** 2
    return np.sign(r) * SOFT_L1_SCALE * np.sqrt(2.0 * (np.sqrt(1.0 + z) - 1.0))


def least_squares(
    fun: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    scale: np.ndarray,
    max_iter: int = 200,
) -> np.ndarray:
    """Bounded Levenberg-Marquardt (projected steps, forward-difference Jacobian)."""
    x = np.clip(x0, lo, hi)
    r = fun(x)
    cost = float(r @ r)
    lam = 1e-2
    for _ in range(max_iter):
        jac = np.empty((len(r), len(x)))
        for j in range(len(x)):
            h = 1e-6 * scale[j]
            xj = x.copy()
            xj[j] = xj[j] + h if xj[j] + h <= hi[j] else xj[j] - h
            jac[:, j] = (fun(xj) - r) / (xj[j] - x[j])
        a, grad = jac.T @ jac, jac.T @ r
        improved = False
        for _ in range(12):
            step = np.linalg.solve(a + lam * np.diag(np.diag(a) + 1e-12), -grad)
            x_new = np.clip(x + step, lo, hi)
            r_new = fun(x_new)
            cost_new = float(r_new @ r_new)
            if cost_new < cost:
                done = cost - cost_new < 1e-10 * max(cost, 1e-30)
                x, r, cost, lam, improved = x_new, r_new, cost_new, max(lam / 3, 1e-9), True
                break
            lam *= 4
        if not improved or done:
            break
    return x


def fit(
    df: pd.DataFrame,
    t: StepTable,
    params: list[Param],
    free: list[str] | None = None,
    theta0: np.ndarray | None = None,
    by_source: bool = True,
) -> np.ndarray:
    """MAP estimate of the parameters (the `free` ones; the others stay at their prior mean)."""
    names = [p.name for p in params]
    mu = np.array([p.mean for p in params])
    sd = np.array([p.sd for p in params])
    lo = np.array([p.lo for p in params])
    hi = np.array([p.hi for p in params])
    free_idx = np.array([i for i, n in enumerate(names) if free is None or n in free], dtype=int)
    y = df.value.to_numpy(dtype=float) * 1e-3
    if by_source:
        counts = df.source.map(df.source.value_counts()).to_numpy(dtype=float)
        w = 1.0 / np.sqrt(counts)
    else:
        w = np.ones(len(df))
    base = mu.copy() if theta0 is None else theta0.copy()
    if theta0 is None:  # launch floors start binding (mean + 2 sd): below G their gradient is 0
        for i, n in enumerate(names):
            if "launch:" in n:
                base[i] = min(mu[i] + 2 * sd[i], hi[i])

    def resid(xf: np.ndarray) -> np.ndarray:
        theta = base.copy()
        theta[free_idx] = xf
        pred = predict_rows(theta, names, t, len(df))
        err = _soft_l1(np.log(np.maximum(pred, 1e-12) / y)) * w
        return np.concatenate([err, PRIOR_WEIGHT * (xf - mu[free_idx]) / sd[free_idx]])

    xf = least_squares(resid, base[free_idx], lo[free_idx], hi[free_idx], np.maximum(sd[free_idx], 1e-3))
    theta = base.copy()
    theta[free_idx] = xf
    return theta


# ---- fit files --------------------------------------------------------------------------------
def to_fit_file(theta: np.ndarray, params: list[Param], source: str) -> dict[str, Any]:
    """An "overhead-fit" file (the schema `engines.resolve_terms` reads) from fitted parameters."""
    v = {p.name: float(x) for p, x in zip(params, theta, strict=True)}
    gpus = {}
    fams = {k.split(":", 1)[1] for k in v if k.startswith("kernel_scale:")}
    for gpu, fam in [*FAMILIES.items(), *((f, f) for f in fams if f not in FAMILIES.values())]:
        if f"kernel_scale:{fam}" in v:
            gpus[gpu] = {
                "kernel_scale": round(v[f"kernel_scale:{fam}"], 4),
                "host_speed": round(v.get(f"host_speed:{fam}", 1.0), 4),
            }
    engines: dict[str, dict[str, float]] = {}
    for name in v:
        if ":" in name and name.split(":")[0] in ("alpha", "step", "req", "tp"):
            key, cls = name.split(":", 1)
            field_name = {
                "alpha": "allreduce_latency_us",
                "step": "step_us",
                "req": "per_request_us",
                "tp": "tp_broadcast_us",
            }[key]
            engines.setdefault(cls, {})[field_name] = round(v[name], 3)
    launch = {k.split(":")[1]: round(x, 2) for k, x in v.items() if k.startswith("launch:")}
    return {
        "kind": "overhead-fit",
        "source": source,
        "shared": {
            "allreduce_growth": round(v.get("allreduce_growth", 0.3), 4),
            "launch_us_per_layer": launch,
        },
        "gpus": gpus,
        "engines": engines,
        "priors": {p.name: {"mean": p.mean, "sd": p.sd, "source": p.source} for p in params},
    }


def params_from_fit(
    fit_file: dict[str, Any], classes: list[str], families: tuple[str, ...] = ()
) -> list[Param]:
    """Priors centred on a fit file's values (the prior sds kept): the start of a calibration."""
    out = []
    gpus = fit_file.get("gpus", {})
    for p in default_params(classes, families):
        kind, _, key = p.name.partition(":")
        value = None
        if kind in ("kernel_scale", "host_speed"):
            gpu = next((g for g in gpus if family_of(g) == key), None)
            value = gpus[gpu].get(kind) if gpu else None
        elif kind == "allreduce_growth":
            value = fit_file.get("shared", {}).get("allreduce_growth")
        elif kind == "launch":
            value = fit_file.get("shared", {}).get("launch_us_per_layer", {}).get(key)
        else:
            field_name = {
                "alpha": "allreduce_latency_us",
                "step": "step_us",
                "req": "per_request_us",
                "tp": "tp_broadcast_us",
            }[kind]
            value = fit_file.get("engines", {}).get(key, {}).get(field_name)
        out.append(
            Param(p.name, float(value), p.sd, p.lo, p.hi, p.source)
            if value is not None and math.isfinite(value)
            else p
        )
    return out
