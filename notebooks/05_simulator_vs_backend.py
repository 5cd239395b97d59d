# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 5. Simulator vs real backend: the validation report
#
# **Question.** How close are the simulator's step times and request latencies to what the same
# policy does on a real model?
#
# `schedsim.experiments.validate.validate` answers it in three moves:
#
# 1. **Run for real**: replay the workload through the policy and the simulator's own engine loop
#    on the real model (paged KV cache, the policy's block tables), in wall-clock time.
# 2. **Calibrate**: time the real backend on a grid of step shapes covering those the run computed
#    (a prefill chunk over cached context plus D decodes), together with every step of the run, in
#    interleaved repeats (a shape's time is the minimum over them), and fit the whole-step latency
#    model to the grid.
# 3. **Simulate the twin**: replay the *same prepared requests* in simulated time with the fitted
#    model, then compare step by step (re-timed step vs predicted) and request by request (TTFT,
#    TPOT, end-to-end latency).
#
# On a machine without a GPU the backend is the torch reference path of a small random-weight
# Llama-style model on the CPU. Step times are then the CPU time of the thread running the forward
# with one torch thread, so other processes' load counts little; the report says how it measured
# and whether its own measurements were steady enough to judge. Request latencies come from the
# wall clock and do feel the load. On a CUDA machine the same cells run the Triton kernels
# (`real_device="auto"`).

# %%
# %matplotlib inline
import os

import pandas as pd
from matplotlib.figure import Figure

from schedsim.run.config import RunConfig
from schedsim.traces import head, load_workload

SMOKE = os.environ.get("SCHEDSIM_SMOKE") == "1"
try:
    import torch  # noqa: F401  (the real backend's dependency)

    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False
N_REQUESTS = 8 if SMOKE else 48
RATE = 8.0 if SMOKE else 4.0
MODEL = "tiny" if SMOKE else "mini"
POLICIES = ("vllm-async",) if SMOKE else ("vllm", "vllm-async")
pd.set_option("display.width", 160)
print(f"torch available: {HAVE_TORCH}; model preset {MODEL!r}; {N_REQUESTS} requests at {RATE}/s")

# %% [markdown]
# The workload is the head of the Azure conversation trace with its lengths shrunk to the small
# model (prompts / 8, clipped to 8–200 tokens; outputs clipped to 24), keeping its arrival pattern.

# %%
workload = head(load_workload("azure-conv-2023"), N_REQUESTS).copy()
workload["prompt_tokens"] = (workload["prompt_tokens"] // 8).clip(8, 200)
workload["output_tokens"] = workload["output_tokens"].clip(1, 24)
workload[["prompt_tokens", "output_tokens"]].describe().T.round(1)

# %%
if HAVE_TORCH:
    from schedsim.experiments.validate import validate

    reports = {}
    for policy in POLICIES:
        cfg = RunConfig(
            policy=policy,
            block_size=16,
            num_gpu_blocks=512,
            max_model_len=512,
            max_num_seqs=16,
            max_num_batched_tokens=256,
            rate=RATE,
            seed=0,
        )
        reports[policy] = validate(
            cfg,
            workload,
            {"model": MODEL, "cpu_worker_thread": policy == "vllm-async"},
            repeats=2 if SMOKE else 6,
        )
else:
    reports = {}
SKIPPED = (
    "skipped: torch is not installed (pip install 'schedsim[backend]'), so there is no real backend "
    "to validate against; the cells below print this line instead of tables and plots"
)
if not reports:
    print(SKIPPED)

# %% [markdown]
# ## Errors, step by step and request by request
#
# Relative errors |simulated − real| / real: medians and 90th percentiles, beside the calibration's
# own cross-validated error and the noise of the step measurements (the gap between a step's two
# fastest repeats).

# %%
keys = [
    "num_steps",
    "num_requests",
    "calibration_cv_median_rel_err",
    "measurement_noise_rel",
    "measurements_too_noisy",
    "steps_beyond_grid",
    "step_median_rel_err",
    "step_p90_rel_err",
    "step_in_run_median_rel_err",
    "ttft_median_rel_err",
    "ttft_p90_rel_err",
    "tpot_median_rel_err",
    "tpot_p90_rel_err",
    "e2e_median_rel_err",
    "same_output_lengths",
]
errors = pd.DataFrame({p: {k: r.summary[k] for k in keys} for p, r in reports.items()})
errors if reports else print(SKIPPED)

# %%
fig = Figure(figsize=(13, 4), layout="constrained") if reports else None
axes = fig.subplots(1, 3) if fig is not None else []
for policy, r in reports.items():
    panels = (
        (r.steps.measured_s, r.steps.predicted_s, "step time (ms)"),
        (r.requests.ttft_real, r.requests.ttft_sim, "TTFT (ms)"),
        (r.requests.tpot_real, r.requests.tpot_sim, "TPOT (ms)"),
    )
    for ax, (real, sim, label) in zip(axes, panels, strict=True):
        ax.scatter(real * 1e3, sim * 1e3, s=10, alpha=0.6, label=policy)
        ax.set(xlabel=f"real {label}", ylabel=f"simulated {label}")
if fig is not None:
    for ax in axes:
        lo, hi = ax.get_xlim()
        ax.plot([0, hi], [0, hi], "k--", lw=0.8)
        ax.legend(fontsize="small")
fig if fig is not None else print(SKIPPED)

# %% [markdown]
# ## Does the real engine hide CPU work the way the simulator says?
#
# The same run-level figures from the real run and from its simulated twin: GPU (model) idle
# fraction, the share of CPU time hidden under model time, and throughput.

# %%
figs = [
    "duration_s",
    "gpu_idle_fraction",
    "cpu_hidden_fraction",
    "mean_ttft_ms",
    "mean_tpot_ms",
    "output_throughput",
]
rows = {}
for policy, r in reports.items():
    rows[(policy, "real")] = {k: r.real.summary.get(k) for k in figs}
    rows[(policy, "simulated")] = {k: r.sim.summary.get(k) for k in figs}
side = pd.DataFrame(rows)
side if reports else print(SKIPPED)

# %%
for policy, r in reports.items():
    s = r.summary
    assert s["same_output_lengths"], policy  # the twin ran the same requests to the same lengths
    print(
        f"{policy}: median step-time error {s['step_median_rel_err']:.0%} (p90 {s['step_p90_rel_err']:.0%}), "
        f"median TTFT error {s['ttft_median_rel_err']:.0%}, median TPOT error {s['tpot_median_rel_err']:.0%}; "
        f"both worlds produced the same output lengths.\n  step timing: {s['step_timing']}\n  "
        f"{s['noise_verdict']}"
    )
if not reports:
    print(SKIPPED)
