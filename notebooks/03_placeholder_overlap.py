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
# # 3. Placeholder overlap: synchronous vs asynchronous scheduling
#
# **Question.** How much GPU time does the CPU side of the engine cost, and how much of it does
# vLLM's async scheduling hide?
#
# In synchronous mode (`vllm`, `EngineCore.step`) the GPU idles while the CPU schedules the next
# step, prepares its inputs and processes the previous step's outputs. vLLM's `AsyncScheduler`
# (`vllm-async`, a batch queue of depth 2) schedules step *s+1* while step *s* runs on the GPU, with
# **output placeholders** standing in for the tokens not sampled yet. The CPU work then overlaps the
# GPU step, and only the part longer than the GPU step shows as GPU idle time.
#
# The effect grows as the CPU cost per step grows *relative to the GPU step time*: small models on
# fast GPUs. We scale the modelled CPU phase costs (`cpu_cost_scale`) on Llama-3.1-8B / H200.

# %%
# %matplotlib inline
import os
import tempfile
from pathlib import Path

import pandas as pd
from schedsim.run.config import RunConfig
from schedsim.outputs.compare_plots import plot_metric_vs_knob
from schedsim.policies import list_policies
from schedsim.experiments.sweep import expand_grid, run_sweep

SMOKE = os.environ.get("SCHEDSIM_SMOKE") == "1"
N_REQUESTS = 30 if SMOKE else 800
SCALES = [1.0, 8.0] if SMOKE else [0.25, 1.0, 4.0, 16.0]
registered = {p.name for p in list_policies()}
policies = [p for p in ("vllm", "vllm-async") if p in registered]
out = Path(tempfile.mkdtemp(prefix="schedsim_nb3_")) if SMOKE else Path("sweep_overlap")
pd.set_option("display.width", 160)
print(f"policies: {policies}; CPU cost scales: {SCALES}")

# %%
base = RunConfig(
    trace="azure-conv-2023", max_requests=N_REQUESTS, seed=0, model="llama-3.1-8b", gpu="h200", rate=8.0
)
table = run_sweep(
    expand_grid(base, {"policy": policies, "cpu_cost_scale": SCALES}),
    out,
    workers=1 if SMOKE else 2,
    progress=False,
)
cols = [
    "policy",
    "cpu_cost_scale",
    "gpu_idle_fraction",
    "cpu_hidden_fraction",
    "mean_tpot_ms",
    "p99_tpot_ms",
    "output_throughput",
    "mean_ttft_ms",
]
table.sort_values(["cpu_cost_scale", "policy"])[cols].reset_index(drop=True)

# %% [markdown]
# ## GPU idle fraction, hidden CPU share, TPOT and throughput against the CPU cost

# %%
plot_metric_vs_knob(table, "cpu_cost_scale", "gpu_idle_fraction", ["policy"])

# %%
plot_metric_vs_knob(table, "cpu_cost_scale", "cpu_hidden_fraction", ["policy"])

# %%
plot_metric_vs_knob(table, "cpu_cost_scale", "mean_tpot_ms", ["policy"])

# %%
plot_metric_vs_knob(table, "cpu_cost_scale", "output_throughput", ["policy"])

# %% [markdown]
# ## What the numbers say

# %%
wide = table.pivot_table(
    index="cpu_cost_scale",
    columns="policy",
    values=["gpu_idle_fraction", "cpu_hidden_fraction", "mean_tpot_ms"],
)
if {"vllm", "vllm-async"} <= set(policies):
    for scale, row in wide.iterrows():
        idle_s, idle_a = row[("gpu_idle_fraction", "vllm")], row[("gpu_idle_fraction", "vllm-async")]
        tpot_s, tpot_a = row[("mean_tpot_ms", "vllm")], row[("mean_tpot_ms", "vllm-async")]
        print(
            f"CPU cost x{scale:g}: GPU idle {idle_s:.1%} sync vs {idle_a:.1%} async; "
            f"mean TPOT {tpot_s:.2f} vs {tpot_a:.2f} ms ({(tpot_s - tpot_a) / tpot_s:+.1%} saved)"
        )
wide
