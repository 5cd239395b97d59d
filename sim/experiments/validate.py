"""`validate`: one small workload in both worlds — on the real backend, and in the simulator whose GPU
model was fitted to that same backend — compared step by step and request by request.

Order: the real run (each step measured once, as it ran); then a calibration grid covering the shapes
it ran (`CalibrationGrid.covering`) and every step it took, timed together in the same interleaved
passes, each as the minimum over its repeats; the step model is fitted to the grid and judged on the
re-timed steps. The gap between a step's two fastest repeats is the measurement's own noise: above
NOISE_LIMIT (median over steps) the report says the measurements were too noisy to judge.
Request-level figures (TTFT, TPOT) come from the wall clock of the real run.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from schedsim.latency.base import StepShape
from schedsim.latency.fitted import FEATURES, FittedStepModel, fit_step_model, steps_frame
from schedsim.policies import Request
from schedsim.run.config import RunConfig
from schedsim.run.real import RealResolved, make_executor, progress_bar, run_real
from schedsim.run.resolve import make_cpu_model
from schedsim.run.result import RunResult
from schedsim.run.simulate import build_result, build_sim_run
from schedsim.run.workload import PreparedWorkload

# Request fields that describe the workload (the rest is scheduling state a run mutates).
_WORKLOAD_FIELDS = tuple(f.name for f in dataclasses.fields(Request))[
    : [f.name for f in dataclasses.fields(Request)].index("status")
]
NOISE_LIMIT = 0.10  # a step's two fastest repeats disagreeing by more cannot judge a 10 % step error
RETIME_REPEATS = 6  # timed re-runs of each calibration shape and of each step of the real run


@dataclass
class ValidationReport:
    """Per-step and per-request comparisons, their summary, and both runs."""

    steps: pd.DataFrame
    requests: pd.DataFrame
    summary: dict[str, Any]
    calibration: dict[str, Any]
    real: RunResult
    sim: RunResult
    grid_steps: pd.DataFrame  # the calibration grid's measured shapes (what the step model was fitted to)

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


def grid_covering(shapes: list[StepShape], max_positions: int, repeats: int = RETIME_REPEATS) -> Any:
    """A calibration grid spanning the largest prefill, decode batch and context a run computed
    (one prefill chunk as long as a step's prefill tokens together, within the model's positions)."""
    from schedsim.backend.calibrate import CalibrationGrid  # torch: imported only for real runs

    prefill = max((sum(n for n, _ in s.prefills) for s in shapes), default=1)
    decodes = max((len(s.decodes) for s in shapes), default=1)
    context = max(
        (max([c + n for n, c in s.prefills] + [c + 1 + k for c, k in s.decodes]) for s in shapes), default=16
    )
    context = min(max(context, prefill), max_positions)
    return CalibrationGrid.covering(min(prefill, context), context, decodes, repeats)


def beyond_grid(steps: pd.DataFrame, bounds: dict[str, float]) -> int:
    """Steps with a feature past the grid's largest value (the fitted model extrapolates there)."""
    over = np.zeros(len(steps), dtype=bool)
    for name in FEATURES:
        over |= steps[name].to_numpy(dtype=float) > bounds[name] * (1 + 1e-9)
    return int(over.sum())


def measure(
    executor: Any, grid: Any, shapes: list[StepShape], repeats: int, progress: bool = False
) -> tuple[pd.DataFrame, Any]:
    """The calibration table of the grid and the timings of every step the run took, measured in the
    same interleaved passes (so a change of load between the two cannot bias one against the other)."""
    from schedsim.backend.calibrate import grid_shape, grid_table  # torch: imported only for real runs
    from schedsim.backend.step_timing import time_shapes

    keys = [(tuple(s.prefills), tuple(c for c, _ in s.decodes)) for s in shapes]
    distinct = list(dict.fromkeys(keys))
    grid_shapes = grid.shapes()
    bar = progress_bar(repeats + 1, progress, f"timing {len(grid_shapes) + len(distinct)} shapes", "pass")
    with bar:
        times = time_shapes(
            executor, [grid_shape(g) for g in grid_shapes] + distinct, repeats, lambda: bar.update(1)
        )
    index = {k: len(grid_shapes) + i for i, k in enumerate(distinct)}
    return grid_table(grid_shapes, times.columns(slice(0, len(grid_shapes)))), times.columns(
        [index[k] for k in keys]
    )


def noise_verdict(noise: float) -> tuple[bool, str]:
    """Whether the measurements can judge the step model, and the sentence that says so."""
    if np.isnan(noise):
        return True, "one repeat per step: measurement noise not estimated, so not judged (use repeats >= 2)"
    if noise > NOISE_LIMIT:
        return True, (
            f"too noisy to judge: the two fastest timings of the same step differ by {noise:.1%} "
            f"(median over steps; limit {NOISE_LIMIT:.0%}); rerun on a quieter machine or with more --repeats"
        )
    return False, (
        f"measurements steady enough to judge: the two fastest timings of the same step differ by "
        f"{noise:.1%} (median over steps; limit {NOISE_LIMIT:.0%})"
    )


def validate(
    config: RunConfig | None = None,
    workload: pd.DataFrame | None = None,
    backend: dict[str, Any] | None = None,
    grid: Any = None,
    full_trace: bool = False,
    progress: bool = False,
    announce: Callable[[str], None] | None = None,
    repeats: int = RETIME_REPEATS,
) -> ValidationReport:
    """Run the workload for real; time a calibration grid covering its shapes (or the given grid)
    together with every step it took; fit the whole-step model to the grid; simulate the workload
    with that model, and compare."""
    cfg = config or RunConfig()
    executor = make_executor(cfg, backend)
    try:
        executor.warmup()
        real = run_real(
            cfg,
            workload,
            executor=executor,
            warmup=False,
            full_trace=full_trace,
            progress=progress,
            announce=announce,
        )
        shapes = real.extra["step_shapes"]
        grid = grid or grid_covering(shapes, executor.model.cfg.max_position_embeddings, repeats)
        table, retimed = measure(executor, grid, shapes, repeats, progress)
        timing = executor.timing_method()
    finally:
        executor.close()
    cal = fit_step_model(
        table,
        source="schedsim validate (backend grid)",
        model=executor.model.cfg.source,
        gpu=str(executor.device),
    )
    latency = FittedStepModel.from_calibration(cal)
    best, gaps = retimed.best_s, retimed.top_two_gap()
    sim = simulate_prepared(
        cfg, real.extra["prepared"], latency, real.config["resolved_policy_options"], executor.describe()
    )
    steps = steps_frame(shapes, list(best)).rename(columns={"step_time_s": "measured_s"})
    steps["in_run_s"] = real.extra["real_steps"].step_time_s.to_numpy()
    steps["repeat_gap"] = gaps
    steps["predicted_s"] = [latency.step_time(s) for s in shapes]
    steps["rel_err"] = _rel(steps.predicted_s, steps.measured_s)
    steps["in_run_rel_err"] = _rel(steps.predicted_s, steps.in_run_s)
    cols = ["request_id", "ttft", "tpot", "e2e", "num_output_tokens"]
    reqs = real.requests[cols].merge(sim.requests[cols], on="request_id", suffixes=("_real", "_sim"))
    for m in ("ttft", "tpot", "e2e"):
        reqs[f"{m}_rel_err"] = _rel(reqs[f"{m}_sim"], reqs[f"{m}_real"])
    noise = float(np.nanmedian(gaps)) if len(gaps) and not np.isnan(gaps).all() else float("nan")
    noisy, verdict = noise_verdict(noise)
    beyond = beyond_grid(steps, grid.bounds())
    if beyond:
        warnings.warn(
            f"{beyond} of {len(steps)} steps lie beyond the calibration grid (the fitted step model "
            "extrapolates there)",
            stacklevel=2,
        )
    summary: dict[str, Any] = {
        "policy": cfg.policy,
        "backend": executor.describe(),
        "workload": real.summary["workload"],
        "step_timing": (
            f"{timing}; each step re-timed after the run with the calibration grid, minimum over "
            f"{repeats} interleaved repeats"
        ),
        "request_timing": "wall clock of the real-time run (other processes' load counts)",
        "num_steps": len(steps),
        "num_requests": len(reqs),
        "calibration_shapes": cal["num_steps"],
        "steps_beyond_grid": beyond,
        "calibration_cv_median_rel_err": cal["cv_error"]["median_rel_err"],
        "measurement_noise_rel": noise,
        "measurements_too_noisy": noisy,
        "noise_verdict": verdict,
    }
    for name, err in (
        ("step", steps.rel_err),
        ("step_in_run", steps.in_run_rel_err),
        ("ttft", reqs.ttft_rel_err),
        ("tpot", reqs.tpot_rel_err),
        ("e2e", reqs.e2e_rel_err),
    ):
        summary[f"{name}_median_rel_err"], summary[f"{name}_p90_rel_err"] = _quantiles(err)
    summary["same_output_lengths"] = bool((reqs.num_output_tokens_real == reqs.num_output_tokens_sim).all())
    return ValidationReport(steps, reqs, summary, cal, real, sim, table)
