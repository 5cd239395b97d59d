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
# # 7. Colocated against disaggregated serving
#
# **Question.** Given a fixed number of GPUs, is it better to run every replica colocated (each
# prefills and decodes its own requests, vLLM's chunked prefill mixing the two in one step) or to
# split them into a prefill pool and a decode pool that hand each request's KV cache over an
# interconnect (DistServe, Splitwise, vLLM's NIXL connector)?
#
# * Colocated: `GPUS` vLLM replicas behind a least-outstanding router.
# * Disaggregated `P:D`: `P` prefill replicas and `D` decode replicas (`P + D = GPUS`); a request
#   prefills on one, the decode replica loads its KV over the interconnect
#   (`WAITING_FOR_REMOTE_KVS`), recomputes the last prompt token and decodes.
#
# The measures are DistServe's: **SLO attainment**, the share of requests whose TTFT and TPOT both
# meet their SLO, and **per-GPU goodput**, the highest request rate per GPU at which at least
# `TARGET` of the requests do. Beside them, the goodput curve at each rate: requests per second per
# GPU that meet both SLOs (vLLM's `--goodput`, the summary's `request_goodput`). Three questions, each answered from the tables below: how
# attainment falls with the rate for each layout, which `P:D` split serves the most, and how that
# answer moves with the KV transfer bandwidth.

# %%
# %matplotlib inline
import os

import matplotlib.pyplot as plt
import pandas as pd

from schedsim import RunConfig, simulate
from schedsim.traces import head, load_workload

SMOKE = os.environ.get("SCHEDSIM_SMOKE") == "1"
GPUS = 2 if SMOKE else 4
N_REQUESTS = 80 if SMOKE else 800
RATES_PER_GPU = [3.0, 9.0] if SMOKE else [3.0, 6.0, 7.5, 9.0, 10.5, 12.0]
SLO_TTFT_MS, SLO_TPOT_MS = 500.0, 15.0
TARGET = 0.9  # the attainment a rate must reach to count toward goodput
SPLITS = [f"{p}:{GPUS - p}" for p in range(1, GPUS)]
LAYOUTS = ["colocated", *SPLITS]
LINKS = (
    ["ib-400g", "custom:0.5:50"]
    if SMOKE
    else ["nvlink", "ib-400g", "eth-100g", "custom:2:50", "custom:0.5:50"]
)
pd.set_option("display.width", 160)
workload = head(load_workload("azure-conv-2023"), N_REQUESTS)
base = RunConfig(
    trace="azure-conv-2023",
    max_requests=N_REQUESTS,
    policy="vllm",
    router="least-outstanding",
    slo_ttft_ms=SLO_TTFT_MS,
    slo_tpot_ms=SLO_TPOT_MS,
    seed=0,
)
print(
    f"{len(workload)} requests of the Azure conversation trace on {GPUS} GPUs ({base.model} on {base.gpu}); "
    f"SLOs: TTFT <= {SLO_TTFT_MS:.0f} ms, TPOT <= {SLO_TPOT_MS:.0f} ms"
)


def run(rate_per_gpu: float, layout: str, link: str = "ib-400g") -> dict:
    """One point: SLO attainment and the figures behind it, from the request and transfer tables."""
    split = None if layout == "colocated" else layout
    cfg = RunConfig(
        **{
            **base.to_dict(),
            "rate": rate_per_gpu * GPUS,
            "replicas": GPUS if split is None else 1,
            "pd": split,
            "interconnect": link,
        }
    )
    r = simulate(cfg, workload=workload)
    q = r.requests
    done = q["finish_reason"].isin(["stop", "length"])
    meets = done & (q["ttft"] * 1e3 <= SLO_TTFT_MS) & ((q["tpot"] * 1e3 <= SLO_TPOT_MS) | q["tpot"].isna())
    transfers = r.tables().get("transfers", pd.DataFrame())
    return {
        "rate_per_gpu": rate_per_gpu,
        "layout": layout,
        "link": link,
        "attainment": float(meets.mean()),
        "goodput_per_gpu": r.summary["request_goodput"] / GPUS,
        "ttft_ok": float((done & (q["ttft"] * 1e3 <= SLO_TTFT_MS)).mean()),
        "tpot_ok": float((done & ((q["tpot"] * 1e3 <= SLO_TPOT_MS) | q["tpot"].isna())).mean()),
        "p90_ttft_ms": float(q["ttft"].quantile(0.9) * 1e3),
        "p90_tpot_ms": float(q["tpot"].quantile(0.9) * 1e3),
        "num_finished": int(done.sum()),
        "num_transfers": len(transfers),
        "mean_transfer_ms": float(transfers["transfer_time"].mean() * 1e3) if len(transfers) else 0.0,
        "failed_transfers": int(transfers["failed"].sum()) if len(transfers) else 0,
    }


def goodput_per_gpu(attainment: pd.Series) -> float:
    """The highest rate measured whose attainment reaches TARGET, with every lower rate (0: none)."""
    ok = (attainment >= TARGET).cummin()
    return float(attainment.index[ok].max()) if ok.any() else 0.0


# %% [markdown]
# ## Attainment against the request rate (KV over 400 Gb/s InfiniBand)

# %%
by_rate = pd.DataFrame([run(rate, layout) for rate in RATES_PER_GPU for layout in LAYOUTS])
attainment = by_rate.pivot(index="rate_per_gpu", columns="layout", values="attainment")[LAYOUTS]
attainment.round(3)

# %%
by_rate.set_index(["rate_per_gpu", "layout"])[["ttft_ok", "tpot_ok", "p90_ttft_ms", "p90_tpot_ms"]].round(2)

# %%
goodput_curves = by_rate.pivot(index="rate_per_gpu", columns="layout", values="goodput_per_gpu")[LAYOUTS]
fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 3.5))
attainment.plot(ax=ax, marker="o")
ax.axhline(TARGET, color="grey", lw=0.8, ls="--")
ax.set_xlabel("request rate per GPU (req/s)")
ax.set_ylabel("SLO attainment")
ax.set_title(f"{GPUS} GPUs; TTFT <= {SLO_TTFT_MS:.0f} ms and TPOT <= {SLO_TPOT_MS:.0f} ms")
goodput_curves.plot(ax=ax2, marker="o")
ax2.set_xlabel("request rate per GPU (req/s)")
ax2.set_ylabel("goodput per GPU (req/s within both SLOs)")
fig.tight_layout()

# %% [markdown]
# ## How the answer moves with the KV transfer bandwidth
#
# At the highest rate where some disaggregated split still reaches `TARGET` over InfiniBand (or
# the lowest rate measured if none does), each split again over slower and faster links.

# %%
goodput = {layout: goodput_per_gpu(attainment[layout]) for layout in LAYOUTS}
pd_rates = [r for r in RATES_PER_GPU if (attainment.loc[r, SPLITS] >= TARGET).any()]
RATE_FOR_LINKS = max(pd_rates) if pd_rates else RATES_PER_GPU[0]
by_link = pd.DataFrame([run(RATE_FOR_LINKS, split, link) for link in LINKS for split in SPLITS])
link_attainment = by_link.pivot(index="link", columns="layout", values="attainment").loc[LINKS, SPLITS]
link_attainment["colocated"] = attainment.loc[RATE_FOR_LINKS, "colocated"]
link_transfer_ms = by_link.groupby("link", sort=False)["mean_transfer_ms"].mean()
link_attainment.assign(mean_transfer_ms=link_transfer_ms).round(3)

# %%
fig, ax = plt.subplots(figsize=(6, 3.5))
link_attainment[SPLITS].plot.bar(ax=ax, rot=0)
ax.axhline(link_attainment["colocated"].iloc[0], color="black", lw=1, ls=":", label="colocated")
ax.axhline(TARGET, color="grey", lw=0.8, ls="--")
ax.set_xlabel("interconnect")
ax.set_ylabel("SLO attainment")
ax.set_title(f"{RATE_FOR_LINKS:g} req/s per GPU")
ax.legend(fontsize=8)
fig.tight_layout()

# %% [markdown]
# ## What the numbers say

# %%
assert (by_rate["num_finished"] == len(workload)).all(), "every request finishes in every layout"
assert (by_rate.loc[by_rate["layout"] != "colocated", "num_transfers"] == len(workload)).all()
assert (by_rate["failed_transfers"] == 0).all() and (by_link["failed_transfers"] == 0).all()
slowest, fastest = "custom:0.5:50", "ib-400g"
assert link_transfer_ms[slowest] > link_transfer_ms[fastest], "a slower link takes longer per transfer"

best_split = max(SPLITS, key=lambda s: (goodput[s], attainment[s].mean()))
print(
    "Per-GPU goodput (highest rate with at least "
    f"{TARGET:.0%} of requests within both SLOs): "
    + ", ".join(f"{layout} {goodput[layout]:g} req/s" for layout in LAYOUTS)
    + "."
)
if goodput[best_split] > goodput["colocated"]:
    verdict = f"disaggregation ({best_split}) serves more per GPU than colocation"
elif goodput[best_split] < goodput["colocated"]:
    verdict = f"colocation serves more per GPU than the best split ({best_split})"
else:
    verdict = f"colocation and the best split ({best_split}) reach the same rate"
print(f"On this trace and these SLOs {verdict}.")
for r in RATES_PER_GPU:
    row = by_rate[by_rate["rate_per_gpu"] == r].set_index("layout")
    print(
        f"At {r:g} req/s per GPU: colocated {row.loc['colocated', 'attainment']:.0%} "
        f"(TTFT met {row.loc['colocated', 'ttft_ok']:.0%}, TPOT met {row.loc['colocated', 'tpot_ok']:.0%}); "
        + "; ".join(
            f"{s} {row.loc[s, 'attainment']:.0%} (TTFT {row.loc[s, 'ttft_ok']:.0%}, TPOT {row.loc[s, 'tpot_ok']:.0%})"
            for s in SPLITS
        )
        + "."
    )
link_best = link_attainment[SPLITS].idxmax(axis=1)
for link in LINKS:
    print(
        f"Over {link} (mean transfer {link_transfer_ms[link]:.1f} ms) at {RATE_FOR_LINKS:g} req/s per GPU: "
        f"the best split is {link_best[link]} at {link_attainment.loc[link, link_best[link]]:.0%} attainment "
        f"(colocated: {link_attainment.loc[link, 'colocated']:.0%})."
    )
