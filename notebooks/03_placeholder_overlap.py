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
from schedsim import simulate
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
    # The claims of the introduction, checked on these numbers: async hides CPU work at every scale,
    idle = wide["gpu_idle_fraction"]
    hidden = wide["cpu_hidden_fraction"]
    assert (idle["vllm-async"] < idle["vllm"]).all(), idle
    assert (hidden["vllm-async"] > hidden["vllm"]).all(), hidden
    # and what it saves grows with the CPU cost relative to the GPU step.
    saved = idle["vllm"] - idle["vllm-async"]
    assert saved.is_monotonic_increasing, saved
    lo_scale, hi_scale = saved.index.min(), saved.index.max()
    print(
        f"Async scheduling hides CPU work at every scale: it lowers the GPU idle fraction by "
        f"{100 * saved[lo_scale]:.1f} points at x{lo_scale:g} and {100 * saved[hi_scale]:.1f} points at "
        f"x{hi_scale:g}; the synchronous engine's "
        f"GPU idles {idle.loc[hi_scale, 'vllm']:.1%} of the time there, the async one "
        f"{idle.loc[hi_scale, 'vllm-async']:.1%}."
    )
wide

# %% [markdown]
# ## Structured output and speculative decoding
#
# Two features change what async scheduling can overlap (`docs/policies-vllm.md` has vLLM
# 0.33.0's rules).
#
# * **Structured output.** The sampler applies a grammar bitmask, and a request's bitmask needs
#   its previous token. With one step in flight, a step in which a structured request decodes
#   again has its sampling *deferred*: its forward runs, but it samples only after the engine
#   thread has processed the previous step's output and filled the bitmask (the
#   `grammar_bitmask` CPU phase, 40 µs a bitmask row by default). The pipeline is serialised
#   for that part of the step.
# * **Speculative decoding** (`num_spec_tokens` = k, `draft_model`). vLLM's `AsyncScheduler`
#   never sees the drafts: every decode step schedules 1 + k positions, placeholders for drafts
#   it will only learn about when the output returns, whatever the acceptance; the rejected ones
#   are rolled back then. With structured output, each request also owns 1 + k bitmask rows.
#
# Same trace, `vllm-async`, with neither, either or both features (k = 3, acceptance rate 0.7;
# the draft model's own passes are not timed here, `draft_model` would add them), at the
# default CPU cost and at 20 times it.

# %%
N_FEATURE = 30 if SMOKE else 300
FEATURE_SCALES = [1.0, 20.0]
K = 3
variants = {
    "plain": {},
    "structured": {"structured_fraction": 1.0},
    "spec": {"num_spec_tokens": K},
    "spec+structured": {"num_spec_tokens": K, "structured_fraction": 1.0},
}
rows = []
for name, kw in variants.items():
    for scale in FEATURE_SCALES:
        res = simulate(
            RunConfig(
                trace="azure-conv-2023",
                max_requests=N_FEATURE,
                seed=0,
                model="llama-3.1-8b",
                gpu="h200",
                rate=8.0,
                policy="vllm-async",
                cpu_cost_scale=scale,
                **kw,
            )
        )
        ran = res.steps[res.steps["num_prefill_tokens"] + res.steps["num_decode_tokens"] > 0]
        rows.append(
            {
                "variant": name,
                "cpu_cost_scale": scale,
                "steps": len(ran),
                "deferred_share": ran["deferred_sampling"].mean(),
                # steps whose sampling waited past their own GPU time (the update and the bitmask)
                "held_share": ((ran["end"] - ran["start"]) > ran["gpu_time"] * (1 + 1e-9)).mean(),
                "gpu_idle_fraction": res.summary["gpu_idle_fraction"],
                "cpu_hidden_fraction": res.summary["cpu_hidden_fraction"],
                "mean_tpot_ms": res.summary["mean_tpot_ms"],
                "output_tokens": int(res.requests["num_output_tokens"].sum()),
                "decode_request_steps": int(ran["num_decode_reqs"].sum()),
                "decode_positions": int(ran["num_decode_tokens"].sum()),
            }
        )
feat = pd.DataFrame(rows)
feat

# %%
plot_metric_vs_knob(feat, "cpu_cost_scale", "gpu_idle_fraction", ["variant"])

# %%
plot_metric_vs_knob(feat, "cpu_cost_scale", "cpu_hidden_fraction", ["variant"])

# %% [markdown]
# ## What the numbers say (structured output, speculative decoding)

# %%
f = feat.set_index(["variant", "cpu_cost_scale"])
lo, hi = FEATURE_SCALES
plain, so, spec, both = "plain", "structured", "spec", "spec+structured"

# 1. Deferral: any batch in which a structured request decodes again.
assert (f["deferred_share"].loc[[plain, spec]] == 0).all()
assert (f["deferred_share"].loc[[so, both]] > 0.9).all()
print(
    f"Without structured output no batch is deferred; with every request structured "
    f"{f.loc[(so, lo), 'deferred_share']:.1%} of the batches are (a batch is deferred as soon as one "
    f"structured request in it decodes again)."
)

# 2. At the default CPU cost the deferral is free: the update and the bitmask finish before the forward.
assert f.loc[(so, lo), "held_share"] == 0
assert abs(f.loc[(so, lo), "gpu_idle_fraction"] - f.loc[(plain, lo), "gpu_idle_fraction"]) < 0.005
print(
    f"CPU cost x{lo:g}: no deferred step waits past its forward; GPU idle "
    f"{f.loc[(plain, lo), 'gpu_idle_fraction']:.1%} without and {f.loc[(so, lo), 'gpu_idle_fraction']:.1%} "
    f"with structured output."
)

# 3. With a slow engine thread the deferral serialises the pipeline.
assert f.loc[(so, hi), "held_share"] > 0
assert f.loc[(so, hi), "gpu_idle_fraction"] > f.loc[(plain, hi), "gpu_idle_fraction"]
assert f.loc[(so, hi), "cpu_hidden_fraction"] < f.loc[(plain, hi), "cpu_hidden_fraction"]
print(
    f"CPU cost x{hi:g}: {f.loc[(so, hi), 'held_share']:.1%} of the structured steps wait for the "
    f"previous update and the bitmask; GPU idle rises from {f.loc[(plain, hi), 'gpu_idle_fraction']:.1%} "
    f"to {f.loc[(so, hi), 'gpu_idle_fraction']:.1%}, the CPU time hidden under the GPU falls from "
    f"{f.loc[(plain, hi), 'cpu_hidden_fraction']:.1%} to {f.loc[(so, hi), 'cpu_hidden_fraction']:.1%}."
)

# 4. Async speculative decoding computes 1 + k positions per decode step whatever the acceptance.
per_step = f.loc[(spec, lo), "decode_positions"] / f.loc[(spec, lo), "decode_request_steps"]
assert abs(per_step - (1 + K)) < 0.1
assert f.loc[(spec, lo), "output_tokens"] == f.loc[(plain, lo), "output_tokens"]
assert f.loc[(spec, lo), "decode_request_steps"] < f.loc[(plain, lo), "decode_request_steps"]
assert f.loc[(spec, lo), "decode_positions"] > f.loc[(plain, lo), "decode_positions"]
print(
    f"Speculative decoding: the same {f.loc[(spec, lo), 'output_tokens']} output tokens take "
    f"{f.loc[(spec, lo), 'decode_request_steps']} decode request-steps instead of "
    f"{f.loc[(plain, lo), 'decode_request_steps']}, but each computes {per_step:.2f} positions "
    f"(1 + k = {1 + K}): {f.loc[(spec, lo), 'decode_positions']} positions instead of "
    f"{f.loc[(plain, lo), 'decode_positions']}."
)

# 5. Both: 1 + k bitmask rows per request make the serialised part longest.
assert f.loc[(both, hi), "gpu_idle_fraction"] == f.xs(hi, level="cpu_cost_scale")["gpu_idle_fraction"].max()
assert f.loc[(both, hi), "held_share"] > f.loc[(so, hi), "held_share"]
print(
    f"Both at x{hi:g}: {f.loc[(both, hi), 'held_share']:.1%} of the steps wait for their sample and "
    f"the GPU idles {f.loc[(both, hi), 'gpu_idle_fraction']:.1%} of the time, the most of the four."
)
