"""Accuracy of the latency models: every figure of docs/accuracy.md, as markdown tables.

1. step latency against six public measurement sources (data/measurements): the GPU models alone
   with the CPU-cost defaults (no overhead terms), and the overhead-term model fitted in-sample,
   leave-one-source-out, and calibrated on half of each deployment's measurements; argonne by
   engine, GPU and batch;
2. the fitted overhead terms and their priors; splitwise's prompt phases by total tokens against
   the in-sample fit and the modelled all-reduces;
3. the GPU models' own accuracy on the shipped operator profiles: table-model interpolation,
   fitted roofline leave-one-model-out, fitted whole-step model.
Run: python bench/latency_accuracy.py   (3-5 minutes on 2 cores)
"""

from __future__ import annotations

import random
import warnings

import numpy as np
import pandas as pd
from schedsim.latency import CpuCostModel, StepShape, make_latency_model
from schedsim.latency.accuracy import interpolation_holdout, roofline_leave_one_model_out, summarize_errors
from schedsim.latency.crossval import evaluate, evaluation_rows, summarize
from schedsim.latency.fitted import fit_step_model, steps_frame
from schedsim.latency.interp import ExtrapolationWarning
from schedsim.latency.measurements import row_steps
from schedsim.latency.profiles import shipped_profiles


def markdown(df: pd.DataFrame) -> str:
    """A pipe table (no tabulate dependency); error columns as percentages."""
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in df.itertuples(index=False):
        cells = []
        for c, v in zip(cols, row, strict=True):
            if isinstance(v, float) and ("signed" in c):
                cells.append(f"{v:+.1%}")
            elif isinstance(v, float) and (c.endswith("err") or c.endswith("abs")):
                cells.append(f"{v:.1%}")
            elif isinstance(v, float):
                cells.append(f"{v:.3g}")
            else:
                cells.append(str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def gpu_only_baseline(df: pd.DataFrame) -> np.ndarray:
    """Predictions (ms) of the GPU models without overhead terms plus the CPU-cost defaults of a
    synchronous engine: the model before the overhead terms."""
    cpu, out = CpuCostModel(), []
    for r in df.itertuples(index=False):
        lm = make_latency_model(r.model, r.gpu, int(r.tp), engine="none")
        out.append(
            sum(s.weight * (lm.step_time(s.shape) + cpu.step_total(s.reqs, s.tokens)) for s in row_steps(r))
            * 1e3
        )
    return np.array(out)


def by_tp_phase(points: pd.DataFrame, col: str) -> pd.DataFrame:
    """Signed / absolute error by TP degree (columns) and phase (rows)."""
    s = summarize(points.assign(err=points[col] / points.value - 1), ["phase", "tp"])
    s["cell"] = [
        f"{a:+.1%} / {b:.1%} ({n})" for a, b, n in zip(s.median_signed, s.median_abs, s.n, strict=True)
    ]
    out = s.pivot(index="phase", columns="tp", values="cell").fillna("—").reset_index()
    out.columns = ["phase", *(f"TP {c}" for c in out.columns[1:])]
    return out


def sources_section() -> None:
    res = evaluate()
    p = res["points"]
    p["pred_none_ms"] = gpu_only_baseline(p)
    cols = {
        "pred_none_ms": "GPU models + CPU defaults, no overhead terms",
        "pred_in_ms": "overhead terms, in-sample (fit on every source)",
        "pred_loso_ms": "overhead terms, leave one source out",
        "pred_half_ms": "overhead terms, each deployment calibrated on half of its rows "
        "(start: the fit without its source), tested on the other half",
    }
    print("## Rows evaluated\n")
    print(markdown(p.groupby(["source", "engine_profile"]).size().rename("rows").reset_index()))
    overall = []
    for col, title in cols.items():
        s = summarize(p.assign(err=p[col] / p.value - 1, model_="all"), ["model_"])
        overall.append({"evaluation": title, **s.drop(columns="model_").iloc[0].to_dict()})
    print("\n## Overall\n")
    print(markdown(pd.DataFrame(overall).astype({"n": int})))
    for col, title in cols.items():
        print(f"\n## {title}: by source\n")
        print(markdown(summarize(p.assign(err=p[col] / p.value - 1), ["source"])))
        print(f"\n## {title}: median signed / absolute error (n) by phase and TP\n")
        print(markdown(by_tp_phase(p, col)))
    print("\n## Leave one source out, by source, GPU, TP and phase\n")
    print(markdown(summarize(p.assign(err=p.pred_loso_ms / p.value - 1), ["source", "gpu", "tp", "phase"])))
    print("\n## Leave one source out and half-calibrated: argonne by engine, GPU and batch\n")
    print(markdown(argonne_by_batch(p)))
    print("\n## Fitted overhead terms (in-sample fit = data/overhead_fit.json) and priors\n")
    rows = [
        {
            "parameter": prm.name,
            "fitted": float(v),
            "prior": f"{prm.mean:g} ± {prm.sd:g}",
            **{f"without {s}": float(res["loso"][s][i]) for s in sorted(res["loso"])},
            "prior source": prm.source,
        }
        for i, (prm, v) in enumerate(zip(res["params"], res["theta"], strict=True))
    ]
    print(markdown(pd.DataFrame(rows)))
    print("\n## Splitwise prompt phases: measured against the in-sample fit, with the modelled all-reduces\n")
    print(markdown(splitwise_prompts(p)))


def argonne_by_batch(points: pd.DataFrame) -> pd.DataFrame:
    """Argonne's left-out error by engine, GPU and batch, with the half-calibrated signed error:
    whether a trend with the batch is the model's form or the engine version's host terms."""
    a, keys = points[points.source == "argonne"], ["engine_profile", "gpu", "batch"]
    out = summarize(a.assign(err=a.pred_loso_ms / a.value - 1), keys)
    half = summarize(a.assign(err=a.pred_half_ms / a.value - 1), keys).set_index(keys)
    out["half_calibrated_signed"] = half.reindex(pd.MultiIndex.from_frame(out[keys]))[
        "median_signed"
    ].to_numpy()
    return out.drop(columns="p90_abs")


SPLITWISE_PROMPTS = ((1, 128), (1, 512), (1, 2048), (4, 512), (1, 4096), (8, 512), (1, 8192), (16, 512))


def splitwise_prompts(points: pd.DataFrame) -> pd.DataFrame:
    """Splitwise's prompt phases at TP 2/4/8 by total tokens: measured and in-sample times, the
    modelled all-reduces of the step (fixed latency plus the bandwidth of Vidur's measured NCCL
    profile) and the measured decode step of the same deployment (batch 1, 512-token prompt)."""
    s = points[points.source == "splitwise"]
    rows = []
    for (gpu, tp), g in s.groupby(["gpu", "tp"], sort=True):
        lm = make_latency_model("llama-2-70b", gpu, int(tp), engine="vllm-v0-eager")
        tpot = g[(g.metric == "tpot") & (g.batch == 1) & (g.input_len == 512) & (g.output_len == 128)]
        for b, i in SPLITWISE_PROMPTS:
            hit = g[(g.metric == "ttft") & (g.batch == b) & (g.input_len == i)]
            if hit.empty:
                continue
            measured, predicted = float(hit.value.median()), float(hit.pred_in_ms.median())
            rows.append(
                {
                    "gpu": gpu,
                    "tp": int(tp),
                    "prompts": f"{b}x{i}",
                    "tokens": b * i,
                    "measured_ms": measured,
                    "in_sample_ms": predicted,
                    "in_sample_signed": predicted / measured - 1,
                    "all_reduce_ms": lm.breakdown(StepShape(prefills=[(i, 0)] * b))["all_reduce"] * 1e3,
                    "measured_us_per_token": measured / (b * i) * 1e3,
                    "decode_step_ms": float(tpot.value.median()) if len(tpot) else float("nan"),
                }
            )
    return pd.DataFrame(rows)


def fitted_step_check(seed: int = 0) -> pd.DataFrame:
    rng = random.Random(seed)
    rows = []
    for model, gpu, tp in [
        ("llama-3-8b", "a100-80gb", 1),
        ("llama-2-70b", "h100-sxm", 4),
        ("qwen-72b", "h100-sxm", 8),
    ]:
        lm = make_latency_model(model, gpu, tp, engine="none")
        shapes = []
        while len(shapes) < 400:
            pre = [(rng.randint(16, 2048), rng.choice([0, 512, 2048])) for _ in range(rng.randint(0, 2))]
            dec = [(rng.randint(16, 4000), 0) for _ in range(rng.randint(0, 128))]
            if pre or dec:
                shapes.append(StepShape(pre, dec))
        cal = fit_step_model(steps_frame(shapes, [lm.step_time(s) for s in shapes]))
        rows.append(
            {
                "model": model,
                "gpu": gpu,
                "tp": tp,
                "cv_median_rel_err": cal["cv_error"]["median_rel_err"],
                "cv_p90_rel_err": cal["cv_error"]["p90_rel_err"],
            }
        )
    return pd.DataFrame(rows)


def profiles_section() -> None:
    prof = shipped_profiles()
    print("\n## Table model: every other interior grid point held out\n")
    print(markdown(summarize_errors(interpolation_holdout(prof))))
    print("\n## Fitted roofline: leave one model out (per GPU)\n")
    loo = pd.concat([roofline_leave_one_model_out(prof, g) for g in ("a100-80gb", "h100-sxm")])
    print(markdown(summarize_errors(loo)))
    print("\n## Fitted whole-step model: 5-fold held-out error against the table model\n")
    print(markdown(fitted_step_check()))


def main() -> None:
    warnings.simplefilter("ignore", ExtrapolationWarning)
    print(f"{len(evaluation_rows())} measurements evaluated\n")
    sources_section()
    profiles_section()


if __name__ == "__main__":
    main()
