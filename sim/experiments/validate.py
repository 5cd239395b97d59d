"""`validate`: one small workload in both worlds — on the real backend, and in the simulator whose GPU
model was fitted to that same backend — compared step by step and request by request."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from schedsim.latency.fitted import FittedStepModel, fit_step_model
from schedsim.policies import Request
from schedsim.run.config import RunConfig
from schedsim.run.real import RealResolved, make_executor, run_real
from schedsim.run.resolve import make_cpu_model
from schedsim.run.result import RunResult
from schedsim.run.simulate import build_result, build_sim_run
from schedsim.run.workload import PreparedWorkload

# Request fields that describe the workload (the rest is scheduling state a run mutates).
_WORKLOAD_FIELDS = tuple(f.name for f in dataclasses.fields(Request))[
    : [f.name for f in dataclasses.fields(Request)].index("status")
]


@dataclass
class ValidationReport:
    """Per-step and per-request comparisons, their summary, and both runs."""

    steps: pd.DataFrame
    requests: pd.DataFrame
    summary: dict[str, Any]
    calibration: dict[str, Any]
    real: RunResult
    sim: RunResult

    def plot(self, path: str | Path) -> Path:
        """Measured vs predicted step times, and real vs simulated TTFT and TPOT, as one PNG."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 3, figsize=(13, 4))
        panels = (
            (self.steps.measured_s * 1e3, self.steps.predicted_s * 1e3, "step time (ms)"),
            (self.requests.ttft_real * 1e3, self.requests.ttft_sim * 1e3, "TTFT (ms)"),
            (self.requests.tpot_real * 1e3, self.requests.tpot_sim * 1e3, "TPOT (ms)"),
        )
        for ax, (real, sim, label) in zip(axes, panels, strict=True):
            ax.scatter(real, sim, s=10, alpha=0.6)
            hi = float(np.nanmax([real.max(), sim.max(), 1e-3]))
            ax.plot([0, hi], [0, hi], "k--", lw=0.8)
            ax.set_xlabel(f"real {label}")
            ax.set_ylabel(f"simulated {label}")
        s = self.summary
        fig.suptitle(
            f"{s['policy']}: step error median {s['step_median_rel_err']:.0%} / p90 "
            f"{s['step_p90_rel_err']:.0%}; TTFT median {s['ttft_median_rel_err']:.0%}"
        )
        fig.tight_layout()
        path = Path(path)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path


def _fresh(requests: list[Request]) -> list[Request]:
    """Unscheduled copies of requests (a run mutates their state)."""
    return [Request(**{k: getattr(r, k) for k in _WORKLOAD_FIELDS}) for r in requests]


def simulate_prepared(
    cfg: RunConfig, prep: PreparedWorkload, latency_model: Any, policy_options: dict[str, Any], backend: str
) -> RunResult:
    """`simulate` on an already prepared workload with a given GPU model (the fitted one)."""
    run = build_sim_run(
        cfg, policy_options, latency_model, make_cpu_model(cfg), prep, requests=_fresh(prep.requests)
    )
    run.world.run()
    resolved = RealResolved(
        cfg,
        f"simulated, GPU model fitted to {backend}",
        policy_options,
        policy_options.get("num_gpu_blocks", 0),
        policy_options.get("max_model_len", 0),
    )
    return build_result(cfg, resolved.describe(), prep, run, 0.0)


def _rel(pred: pd.Series, real: pd.Series) -> pd.Series:
    """|pred - real| / real, NaN where real is not positive."""
    real = real.where(real > 0)
    return (pred - real).abs() / real


def _quantiles(err: pd.Series) -> tuple[float, float]:
    """(median, p90) of the finite errors."""
    err = err.dropna()
    return (float(err.median()), float(err.quantile(0.9))) if len(err) else (float("nan"),) * 2


def validate(
    config: RunConfig | None = None,
    workload: pd.DataFrame | None = None,
    backend: dict[str, Any] | None = None,
    grid: Any = None,
) -> ValidationReport:
    """Calibrate a whole-step model on the backend (grid of shapes), replay the workload for real,
    simulate it with that model, and compare."""
    from schedsim.backend.calibrate import measure_steps  # torch: imported only for real runs

    cfg = config or RunConfig()
    executor = make_executor(cfg, backend)
    try:
        executor.warmup()
        cal = fit_step_model(
            measure_steps(executor, grid),
            source="schedsim validate (backend grid)",
            model=executor.model.cfg.source,
            gpu=str(executor.device),
        )
        real = run_real(cfg, workload, executor=executor, warmup=False)
    finally:
        executor.close()
    latency = FittedStepModel.from_calibration(cal)
    sim = simulate_prepared(
        cfg, real.extra["prepared"], latency, real.config["resolved_policy_options"], executor.describe()
    )
    steps = real.extra["real_steps"].rename(columns={"step_time_s": "measured_s"})
    steps["predicted_s"] = [latency.step_time(s) for s in real.extra["step_shapes"]]
    steps["rel_err"] = _rel(steps.predicted_s, steps.measured_s)
    cols = ["request_id", "ttft", "tpot", "e2e", "num_output_tokens"]
    reqs = real.requests[cols].merge(sim.requests[cols], on="request_id", suffixes=("_real", "_sim"))
    for m in ("ttft", "tpot", "e2e"):
        reqs[f"{m}_rel_err"] = _rel(reqs[f"{m}_sim"], reqs[f"{m}_real"])
    summary: dict[str, Any] = {
        "policy": cfg.policy,
        "backend": executor.describe(),
        "num_steps": len(steps),
        "num_requests": len(reqs),
        "calibration_cv_median_rel_err": cal["cv_error"]["median_rel_err"],
    }
    for name, err in (
        ("step", steps.rel_err),
        ("ttft", reqs.ttft_rel_err),
        ("tpot", reqs.tpot_rel_err),
        ("e2e", reqs.e2e_rel_err),
    ):
        summary[f"{name}_median_rel_err"], summary[f"{name}_p90_rel_err"] = _quantiles(err)
    summary["same_output_lengths"] = bool((reqs.num_output_tokens_real == reqs.num_output_tokens_sim).all())
    return ValidationReport(steps, reqs, summary, cal, real, sim)
