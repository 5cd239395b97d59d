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
# # 2. Pause and preemption rates under KV pressure
#
# **Question.** When the KV-cache pool is small relative to the load, how often does each scheduler
# throw work away, and how much?
#
# * vLLM **preempts by recompute**: the victim's blocks are freed and it goes back to the front of
#   the waiting queue; its prompt *and* the tokens it had generated are computed again later
#   (`recomputed_tokens`).
# * TensorRT-LLM's `max-utilization` **pauses** the last started request: its blocks are freed and
#   its generated tokens are folded into its prompt, to be recomputed on resumption.
#   `guaranteed-no-evict` never evicts: it reserves a request's blocks to completion at admission,
#   so it pays in admission delay instead.
#
# We shrink the KV pool to a fixed number of blocks and sweep the request rate on the Azure
# conversation trace. Each point is one simulated run; the sweep runs on the local process pool and
# is resumable (a finished run is recognised by the hash of its resolved config).

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
N_REQUESTS = 30 if SMOKE else 500
RATES = [4.0, 16.0] if SMOKE else [2.0, 4.0, 8.0, 16.0]
KV_BLOCKS = 400 if SMOKE else 1500  # x 16 tokens per block: a deliberately small pool
registered = {p.name for p in list_policies()}
policies = [
    p
    for p in ("vllm", "vllm-async", "trtllm:guaranteed-no-evict", "trtllm:max-utilization")
    if p in registered
]
out = Path(tempfile.mkdtemp(prefix="schedsim_nb2_")) if SMOKE else Path("sweep_kv_pressure")
pd.set_option("display.width", 160)
print(f"policies: {policies}; rates: {RATES}; KV pool: {KV_BLOCKS} blocks; {N_REQUESTS} requests")

# %%
# Requests carry a client max_tokens of 1,024 (EOS still stops them at the trace's length). Without
# a cap each would ask for everything up to max_model_len, and guaranteed-no-evict, which reserves
# a request's blocks to max_tokens at admission, would run them nearly one at a time.
base = RunConfig(
    trace="azure-conv-2023",
    max_requests=N_REQUESTS,
    seed=0,
    num_gpu_blocks=KV_BLOCKS,
    max_model_len=KV_BLOCKS * 16 // 2,
    max_tokens_source="cap",
    max_tokens_cap=1024,
)
runs = expand_grid(base, {"policy": policies, "rate": RATES})
table = run_sweep(runs, out, workers=1 if SMOKE else 2, progress=False)
table["recomputed_per_request"] = table["recomputed_tokens"] / table["num_requests"]
cols = [
    "policy",
    "rate",
    "num_preemptions",
    "num_pauses",
    "preemption_rate",
    "pause_rate",
    "recomputed_tokens",
    "recomputed_per_request",
    "truncated_tokens",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "max_kv_usage",
]
table.sort_values(["policy", "rate"])[[c for c in cols if c in table.columns]].reset_index(drop=True)

# %% [markdown]
# Running the sweep again does nothing: every run is already recorded under the output folder.

# %%
records = {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*.json")}
again = run_sweep(runs, out, workers=1, progress=False)
rewritten = [p for p, t in records.items() if p.stat().st_mtime_ns != t]
assert len(again) == len(table) and not rewritten, rewritten
print(f"{len(again)} runs, none redone: no run's record was rewritten")

# %% [markdown]
# ## What the numbers say
#
# The introduction's claims, checked on the sweep at its highest rate before they are printed.

# %%
peak = table[table["rate"] == max(RATES)].set_index("policy")
for policy in ("vllm", "vllm-async"):
    if policy in peak.index:
        row = peak.loc[policy]
        # the pool is small enough to bind: vLLM fills it and preempts by recompute
        assert row["max_kv_usage"] >= 0.99 and row["num_preemptions"] > 0 and row["recomputed_tokens"] > 0
        print(
            f"{policy}: the pool fills ({row['max_kv_usage']:.0%} peak); {int(row['num_preemptions'])} "
            f"preemption(s) by recompute, {int(row['recomputed_tokens'])} tokens computed again."
        )
if "trtllm:max-utilization" in peak.index:
    row = peak.loc["trtllm:max-utilization"]
    assert row["num_pauses"] > 0 and row["num_preemptions"] == 0
    print(
        f"max-utilization pauses instead of preempting: {int(row['num_pauses'])} pause(s), "
        f"{int(row['recomputed_tokens'])} tokens recomputed on resumption."
    )
if "trtllm:guaranteed-no-evict" in peak.index:
    row = peak.loc["trtllm:guaranteed-no-evict"]
    others = peak.drop(index="trtllm:guaranteed-no-evict")
    assert row["num_pauses"] == row["num_preemptions"] == row["recomputed_tokens"] == 0
    assert (row["p99_ttft_ms"] > others["p99_ttft_ms"]).all()
    print(
        f"guaranteed-no-evict never evicts (0 pauses, 0 preemptions, 0 tokens recomputed) and pays in "
        f"admission delay: p99 TTFT {row['p99_ttft_ms']:.0f} ms against at most "
        f"{others['p99_ttft_ms'].max():.0f} ms for the others."
    )

# %% [markdown]
# ## Preemptions, pauses and recomputed tokens against the request rate

# %%
plot_metric_vs_knob(table, "rate", "num_preemptions", ["policy"])

# %%
plot_metric_vs_knob(table, "rate", "num_pauses", ["policy"])

# %%
plot_metric_vs_knob(table, "rate", "recomputed_per_request", ["policy"])

# %%
plot_metric_vs_knob(table, "rate", "p99_ttft_ms", ["policy"])

# %% [markdown]
# ## Truncation losses
#
# `truncated_tokens` counts tokens computed past a stop and trimmed (for example a step that ran
# past `max_tokens` or EOS). Work thrown away per policy, at the highest rate:

# %%
top = table[table["rate"] == max(RATES)].set_index("policy")
lost = pd.DataFrame(
    {
        "recomputed_tokens": top["recomputed_tokens"],
        "truncated_tokens": top.get("truncated_tokens"),
        "output_tokens": top["output_throughput"] * top["duration_s"],
    }
)
lost["wasted_share_of_output"] = (lost["recomputed_tokens"] + lost["truncated_tokens"].fillna(0)) / lost[
    "output_tokens"
]
lost.round(3)

# %%
for policy, row in lost.iterrows():
    print(
        f"{policy}: {int(row['recomputed_tokens'])} tokens recomputed, "
        f"{row['wasted_share_of_output']:.1%} of the output tokens at {max(RATES)} req/s"
    )
