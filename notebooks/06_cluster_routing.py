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
# # 6. Routing a fleet on the Mooncake trace
#
# **Question.** A fleet of vLLM replicas sits behind a router. The Mooncake trace shares long
# prompt prefixes, so a router that sends a request where its prefix is already cached saves
# prefill; but following the cache concentrates traffic. How do prefix-aware routing, routing to
# the least loaded replica and round-robin compare on prefix-cache hit rate, TTFT and load
# imbalance, and where does prefix-aware routing overload a replica?
#
# * `round-robin`: blind to load and to the cache.
# * `least-outstanding`: the replica with the fewest requests routed there and not finished.
# * `prefix-aware`: SGLang's cache-aware rule over the router's own tree of routed prefixes (it
#   never asks the engines what they cache), falling back to the least loaded replica when the
#   fleet is imbalanced.
# * `prefix-precise`: the same rule over what each replica's KV cache really holds (its KV-cache
#   events), so evictions on the engines are seen.
#
# Each replica runs vLLM's async scheduler with its own KV pool; the fleet gets the trace at
# `REPLICAS` times the per-replica rate. At each routing decision the router's loads give the
# imbalance (the most loaded replica's outstanding requests over the fleet's mean; it reads N
# whenever a single request is outstanding, so it is large at light load) and the spread (most
# minus least loaded replica, in requests), which grows only when load really piles up.

# %%
# %matplotlib inline
import os

import matplotlib.pyplot as plt
import pandas as pd

from schedsim import RunConfig, simulate
from schedsim.policies.routers import PrefixAwareConfig
from schedsim.traces import head, load_workload, prefix_sharing, window

SMOKE = os.environ.get("SCHEDSIM_SMOKE") == "1"
REPLICAS = 2 if SMOKE else 4
N_REQUESTS = 40 if SMOKE else 800
RATE_PER_REPLICA = 0.5  # notebook 4: what one H100 serves of this trace with a bounded queue
WINDOW_START_S = 850.0
ROUTERS = ["round-robin", "least-outstanding", "prefix-aware", "prefix-precise"]
pd.set_option("display.width", 160)
workload = head(window(load_workload("mooncake-synthetic"), WINDOW_START_S, float("inf")), N_REQUESTS)
ideal = prefix_sharing(workload, block_size=16)["prefix_sharing_ratio"]
print(
    f"{len(workload)} requests, {REPLICAS} replicas; an unbounded shared cache could serve {ideal:.1%} of prompt tokens"
)

# %%
base = RunConfig(
    trace="mooncake-synthetic",
    max_requests=N_REQUESTS,
    rate=RATE_PER_REPLICA * REPLICAS,
    replicas=REPLICAS,
    seed=0,
)
results = {
    name: simulate(RunConfig(**{**base.to_dict(), "router": name}), workload=workload) for name in ROUTERS
}

# %% [markdown]
# ## Hit rate, latency and balance

# %%
rows = []
for name, r in results.items():
    s = r.summary
    per_replica = s["requests_per_replica"]
    rows.append(
        {
            "router": name,
            "hit_rate": s["prefix_cache_hit_rate"],
            "mean_ttft_ms": s["mean_ttft_ms"],
            "p99_ttft_ms": s["p99_ttft_ms"],
            "mean_e2el_ms": s["mean_e2el_ms"],
            "mean_imbalance": s["mean_imbalance"],
            "mean_spread": float((r.routing["max_outstanding"] - r.routing["min_outstanding"]).mean()),
            "max_spread": int((r.routing["max_outstanding"] - r.routing["min_outstanding"]).max()),
            "busiest_share": max(per_replica) / sum(per_replica),
            "prefill_tokens": int(r.steps["num_prefill_tokens"].sum()),
        }
    )
table = pd.DataFrame(rows).set_index("router")
table.round(3)

# %%
fig, axes = plt.subplots(1, len(ROUTERS), figsize=(4 * len(ROUTERS), 3), sharey=True)
for ax, (name, r) in zip(axes, results.items(), strict=True):
    load = r.load.pivot_table(index="time", columns="replica", values="outstanding", aggfunc="last")
    load.plot(ax=ax, legend=False, lw=0.8)
    ax.set_title(name)
    ax.set_xlabel("time (s)")
axes[0].set_ylabel("outstanding requests at each routing")
fig.tight_layout()

# %%
mix = pd.DataFrame({name: r.routing["reason"].value_counts() for name, r in results.items()}).fillna(0).T
mix.plot.bar(stacked=True, figsize=(6, 3), title="routing decisions by reason")

# %% [markdown]
# ## What the numbers say

# %%
t = table
rr, lo, pa, pp = (t.loc[n] for n in ROUTERS)
print(
    f"Prefix-aware routing hits {pa['hit_rate']:.1%} of prompt tokens in the replicas' caches against "
    f"{rr['hit_rate']:.1%} for round-robin and {lo['hit_rate']:.1%} for least-outstanding "
    f"(an unbounded shared cache: {ideal:.1%}); it computes "
    f"{pa['prefill_tokens'] / rr['prefill_tokens'] - 1:+.1%} prefill tokens relative to round-robin "
    f"(negative: fewer)."
)
print(
    f"Mean TTFT: round-robin {rr['mean_ttft_ms']:.0f} ms, least-outstanding {lo['mean_ttft_ms']:.0f} ms, "
    f"prefix-aware {pa['mean_ttft_ms']:.0f} ms, prefix-precise {pp['mean_ttft_ms']:.0f} ms; "
    f"the lowest is {t['mean_ttft_ms'].idxmin()}."
)
worst = t["mean_spread"].idxmax()
print(
    f"Balance: mean spread between the most and least loaded replica {rr['mean_spread']:.2f} requests "
    f"round-robin, {lo['mean_spread']:.2f} least-outstanding, {pa['mean_spread']:.2f} prefix-aware, "
    f"{pp['mean_spread']:.2f} prefix-precise; the most uneven fleet is {worst} (widest spread "
    f"{t.loc[worst, 'max_spread']} requests), whose busiest replica took "
    f"{t.loc[worst, 'busiest_share']:.0%} of the requests."
)

# %% [markdown]
# ## Where prefix-aware routing overloads a replica

# %%
r = results["prefix-aware"]
routing = r.routing
peak = routing.loc[(routing["max_outstanding"] - routing["min_outstanding"]).idxmax()]
spread = int(peak["max_outstanding"] - peak["min_outstanding"])
gap = PrefixAwareConfig().balance_abs_threshold
hits = routing[routing["reason"] == "prefix-hit"]
by_replica = hits["replica"].value_counts()
print(
    f"The widest spread prefix-aware routing let build: at t = {peak['time']:.1f} s the router saw "
    f"replica loads from {peak['min_outstanding']} to {peak['max_outstanding']} outstanding requests "
    f"(imbalance {peak['imbalance']:.2f}), "
    f"{'within' if spread <= gap else 'past'} the {gap}-request gap at which the router rebalances; "
    f"{len(hits)} of {len(routing)} decisions followed a cached prefix"
    + (f", {by_replica.iloc[0]} of them to replica {by_replica.index[0]}" if len(by_replica) else "")
    + f", and {int((routing['reason'] == 'balance').sum())} were overridden to rebalance the fleet."
)
routing.groupby("replica")["reason"].value_counts().unstack(fill_value=0)
