"""`schedsim latency` (a what-if step time) and `schedsim calibrate` (write a calibration file)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from schedsim.cli.exit_codes import EXIT_BAD_INPUT
from schedsim.latency import (
    ENGINES,
    KINDS,
    OverheadModel,
    StepShape,
    make_cpu_cost_model,
    make_latency_model,
)
from schedsim.latency.calibrate import calibrate_from_args
from schedsim.latency.explain import explain_step
from schedsim.run.resolve import match_calibration


def add_parsers(subparsers: Any) -> None:
    """Register `latency` and `calibrate` on the top-level CLI's subparsers."""
    p = subparsers.add_parser(
        "latency",
        help="predicted step time of one step shape",
        description="Predict one GPU step's time and break it down by operator and by latency-model kind.",
    )
    p.add_argument("--model", default="llama-3.1-8b", help="model spec name or config.json path")
    p.add_argument("--gpu", default="h100-sxm", help="GPU spec name")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree")
    p.add_argument("--prefill-tokens", type=int, default=0, help="new tokens of one prefill chunk")
    p.add_argument("--context", type=int, default=0, help="tokens already cached before that chunk")
    p.add_argument("--decode-batch", type=int, default=0, help="number of decoding requests")
    p.add_argument("--decode-context", type=int, default=0, help="context length of each decode")
    p.add_argument("--draft-tokens", type=int, default=0, help="draft tokens verified per decode")
    p.add_argument("--kind", choices=KINDS, default="auto", help="latency model kind")
    p.add_argument(
        "--engine",
        choices=ENGINES,
        default=None,
        help="engine whose overhead terms apply (default: the calibration's, else vllm; "
        "none: the bare GPU model)",
    )
    p.add_argument("--calibration", default=None, help="calibration file from `schedsim calibrate`")
    p.add_argument(
        "--force-calibration",
        action="store_true",
        help="apply --calibration even though it was fitted for another model, GPU or TP",
    )
    p.add_argument(
        "--explain",
        action="store_true",
        help="break the step down by term: compute, memory, per-kernel fixed cost, "
        "collectives, sampler, launch floor, and the host CPU phases",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_latency)

    c = subparsers.add_parser(
        "calibrate",
        help="fit a latency model to measured profiles",
        description="Write a calibration file: import Vidur-format profiles "
        "and fit the roofline (--profile), fit the whole-step model to "
        "measured step times (--steps), fit one deployment's overhead terms "
        "to its measured step times or request latencies (--measurements), "
        "or time schedsim's own policy code, which is not an engine's CPU cost (--cpu).",
    )
    src = c.add_mutually_exclusive_group(required=True)
    src.add_argument("--profile", help="folder of Vidur-format profiles (compute/, network/)")
    src.add_argument(
        "--steps",
        help="CSV of measured steps (step_time_s|step_time_ms, "
        "prefill_tokens, decode_count[, sum_context, sum_context_sq])",
    )
    src.add_argument(
        "--measurements",
        help="CSV of step shapes -> step_time_ms, CSV of static "
        "batches (batch_size, input_len, output_len -> latency_ms/ttft_ms/tpot_ms), or "
        "a vLLM benchmark_latency / benchmark_serving (max-concurrency 1) JSON",
    )
    src.add_argument(
        "--cpu",
        action="store_true",
        help="time schedsim's own policy code (schedule, update_from_output) on this machine: the "
        "simulator's CPU work, not an engine's host overhead (for that: --measurements)",
    )
    c.add_argument("--out", required=True, help="calibration JSON to write")
    c.add_argument("--model", default=None, help="(--steps, --measurements) model measured")
    c.add_argument("--gpu", default=None, help="(--steps, --measurements) GPU measured")
    c.add_argument("--tp", type=int, default=None, help="(--steps, --measurements) TP degree")
    c.add_argument(
        "--engine",
        choices=[e for e in ENGINES if e != "none"],
        default="vllm",
        help="(--measurements) engine that was measured",
    )
    c.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="(--measurements, benchmark_latency JSON) the batch it ran",
    )
    c.add_argument(
        "--input-len",
        type=int,
        default=None,
        help="(--measurements, benchmark_latency JSON) prompt tokens it ran",
    )
    c.add_argument(
        "--output-len",
        type=int,
        default=None,
        help="(--measurements, benchmark_latency JSON) output tokens it ran",
    )
    c.add_argument("--policy", default="vllm", help="(--cpu) policy to time")
    c.set_defaults(func=cmd_calibrate)


def _shape(args: argparse.Namespace) -> StepShape:
    for name in ("tp", "prefill_tokens", "context", "decode_batch", "decode_context", "draft_tokens"):
        if getattr(args, name) < 0:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 0")
    prefills = [(args.prefill_tokens, args.context)] if args.prefill_tokens else []
    return StepShape(prefills, [(args.decode_context, args.draft_tokens)] * args.decode_batch)


def predict(args: argparse.Namespace) -> dict[str, Any]:
    """The chosen model's prediction, its breakdown, and every applicable kind side by side."""
    shape = _shape(args)
    engine = getattr(args, "engine", None)
    if args.calibration:  # fitted for this deployment, or forced
        force = getattr(args, "force_calibration", False)
        match_calibration(
            args.calibration, args.model, args.gpu, args.tp, force, "--calibration", "--force-calibration"
        )
    model = make_latency_model(args.model, args.gpu, args.tp, args.kind, args.calibration, engine)
    out: dict[str, Any] = {
        "model": model.describe(),
        "num_tokens": shape.num_tokens,
        "step_time_ms": model.step_time(shape) * 1e3,
    }
    if hasattr(model, "breakdown"):
        out["breakdown_ms"] = {k: v * 1e3 for k, v in model.breakdown(shape).items()}
    if getattr(args, "explain", False):
        out["explain_ms"] = explain(args, model, shape)
    kinds: dict[str, str | float] = {}
    for kind in ("roofline", "table", "fitted"):
        try:
            other = make_latency_model(args.model, args.gpu, args.tp, kind, args.calibration, engine)
        except ValueError as exc:
            kinds[kind] = f"n/a ({str(exc).split(';')[0]})"
            continue
        kinds[kind] = other.step_time(shape) * 1e3
    out["by_kind_ms"] = kinds
    return out


def explain(args: argparse.Namespace, model: Any, shape: StepShape) -> dict[str, Any]:
    """The step by term (GPU side), and the host CPU phases a synchronous engine adds to it."""
    if not isinstance(model, OverheadModel):
        raise ValueError(
            "--explain needs an engine's overhead terms (not --engine none or a fitted "
            "whole-step calibration)"
        )
    gpu = {k: v * 1e3 for k, v in explain_step(model, shape).items()}
    cpu = make_cpu_cost_model(args.gpu, args.tp, args.calibration, getattr(args, "engine", None))
    n_reqs = len(shape.prefills) + len(shape.decodes)
    phases = {
        k: cpu.phase_time(k, n_reqs, shape.num_tokens) * 1e3
        for k in ("schedule", "prepare_inputs", "d2h_copy", "update_from_output")
    }
    return {
        "gpu_step_ms": gpu,
        "host_cpu_ms": phases,
        "sync_step_ms": sum(gpu.values()) + sum(phases.values()),
    }


def _print_explain(ex: dict[str, Any]) -> None:
    gpu, host = ex["gpu_step_ms"], ex["host_cpu_ms"]
    total = ex["sync_step_ms"]
    print("by term (GPU step):")
    for term, ms in gpu.items():
        print(f"  {term:26s} {ms:10.3f} ms  {100 * ms / total:5.1f}%")
    print("host CPU phases (a synchronous engine adds them; an asynchronous one hides them):")
    for term, ms in host.items():
        print(f"  {term:26s} {ms:10.3f} ms  {100 * ms / total:5.1f}%")
    print(f"  {'synchronous step total':26s} {total:10.3f} ms")


def _text(exc: Exception) -> str:
    """The error's message as written (a KeyError's str() would quote it)."""
    return str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)


def cmd_latency(args: argparse.Namespace) -> int:
    """Print the what-if step time."""
    try:
        out = predict(args)
    except (ValueError, KeyError) as exc:
        print(f"schedsim latency: error: {_text(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps(out, indent=1, default=str))
        return 0
    d = out["model"]
    engine = d.get("overhead", {}).get("engine", "none")
    print(
        f"{d.get('model', args.model)} on {d.get('gpu', args.gpu)} tp={args.tp}, "
        f"{out['num_tokens']} tokens: {out['step_time_ms']:.3f} ms ({d['kind']} model, "
        f"engine {engine})"
    )
    if "explain_ms" in out:
        _print_explain(out["explain_ms"])
        return 0
    for op, ms in sorted(out.get("breakdown_ms", {}).items(), key=lambda kv: -kv[1]):
        if ms > 0:
            print(f"  {op:26s} {ms:10.3f} ms  {100 * ms / out['step_time_ms']:5.1f}%")
    print("by model kind:")
    for kind, ms in out["by_kind_ms"].items():
        print(f"  {kind:10s} " + (f"{ms:10.3f} ms" if isinstance(ms, float) else ms))
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Write the calibration file."""
    try:
        path, summary = calibrate_from_args(args)
    except (ValueError, KeyError, FileNotFoundError) as exc:
        print(f"schedsim calibrate: error: {_text(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(summary)
    print(f"wrote {Path(path)}")
    return 0
