"""`schedsim trace ...`: load, inspect, transform, convert and generate workloads."""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
import warnings
from pathlib import Path
from typing import Any

from schedsim import traces as T

FORMATS = ("azure", "mooncake", "burstgpt", "csv", "jsonl")


def add_parser(subparsers: Any) -> None:
    """Add `trace` and its sub-commands to the schedsim command tree."""
    trace = subparsers.add_parser(
        "trace",
        help="inspect, convert and generate workloads",
        description="Workload tools: shipped names are " + ", ".join(sorted(T.SHIPPED)) + ", or give a path.",
    )
    trace.set_defaults(func=handle_trace, trace_cmd=None)
    sub = trace.add_subparsers(dest="trace_cmd", metavar="ACTION")
    p = sub.add_parser("stats", help="counts, rate over time, length percentiles, prefix sharing")
    _load_args(p)
    p.add_argument("--plot", type=Path, help="write a PNG of arrivals and lengths")
    p.add_argument("--json", action="store_true", help="print the summary row as JSON")
    p.add_argument(
        "--sim-block-size", type=int, default=16, help="block size for the prefix-sharing ratio (default 16)"
    )
    for name, helptext in (
        ("convert", "load, transform and write a native workload file"),
        ("head", "the first N requests (printed, or written with -o)"),
    ):
        p = sub.add_parser(name, help=helptext)
        _load_args(p)
        _transform_args(p)
        p.add_argument(
            "-o",
            "--out",
            type=Path,
            required=name == "convert",
            help="output file (.csv, .jsonl or .parquet)",
        )
        if name == "head":
            p.add_argument("-n", type=int, default=10, help="number of requests (default 10)")
    for fmt in FORMATS:
        p = sub.add_parser(fmt, help=f"read a file in the {fmt} format (stats, or -o to convert)")
        _load_args(p, fmt)
        _transform_args(p)
        p.add_argument("-o", "--out", type=Path, help="write a native workload file")
    p = sub.add_parser("generate", help="a seeded synthetic workload")
    _generate_args(p)
    p = sub.add_parser("concat", help="join workloads one after another or interleaved")
    p.add_argument("specs", nargs="+", help="shipped names or paths")
    p.add_argument("--mode", choices=("sequential", "interleave"), default="sequential")
    p.add_argument("--gap", type=float, default=0.0, help="seconds between sequential parts")
    p.add_argument("-o", "--out", type=Path, required=True)


def _load_args(p: argparse.ArgumentParser, fmt: str | None = None) -> None:
    """Options every load accepts; format-specific ones where they apply."""
    p.add_argument("spec", help="shipped trace name or file path")
    if fmt is None:
        p.add_argument("--format", choices=("auto", *FORMATS, "parquet"), default="auto")
    p.set_defaults(format=fmt or "auto")
    p.add_argument("--config", type=Path, help="JSON/TOML with loader options (mapping, ...)")
    p.add_argument(
        "--sort",
        action="store_true",
        default=None,
        help="sort rows by arrival time instead of failing on decreasing timestamps",
    )
    p.add_argument(
        "--skip-bad",
        action="store_true",
        default=None,
        help="skip malformed rows (reported with count and first line numbers)",
    )
    p.add_argument(
        "--window",
        type=float,
        nargs=2,
        metavar=("START", "END"),
        help="read only requests in [START, END) seconds (lazily)",
    )
    if fmt in (None, "burstgpt"):
        p.add_argument("--model", action="append", help="BurstGPT: keep this model (repeatable)")
        p.add_argument("--log-type", action="append", help="BurstGPT: keep this log type")
    if fmt in (None, "csv", "jsonl"):
        p.add_argument("--map", help="column mapping, e.g. arrival_time=ts,prompt_tokens=in")
        p.add_argument("--time-unit", choices=("s", "ms", "us", "ns", "datetime"))
        p.add_argument("--hash-block-size", type=int, help="block size of a hashes column")


def _transform_args(p: argparse.ArgumentParser) -> None:
    """Transforms applied after loading, in this order."""
    p.add_argument("--filter", help="pandas query, e.g. 'prompt_tokens < 4096'")
    p.add_argument("--sample", type=float, help="keep N requests (>= 1) or a fraction (< 1)")
    p.add_argument("--seed", type=int, default=0, help="seed for --sample")
    p.add_argument("--rate", type=float, help="rescale time to this mean rate (req/s)")
    p.add_argument("--max-requests", type=int, help="keep the first N requests")


def _generate_args(p: argparse.ArgumentParser) -> None:
    """A config file for full control; flags for the common single-class case."""
    p.add_argument("--config", type=Path, help="JSON/TOML WorkloadSpec (arrival, classes, ...)")
    p.add_argument("--process", choices=("poisson", "gamma"))
    p.add_argument("--rate", type=float, help="mean arrival rate (req/s)")
    p.add_argument("--cv", type=float, help="gap coefficient of variation (gamma)")
    p.add_argument("--requests", type=int, help="number of requests")
    p.add_argument("--duration", type=float, help="seconds of arrivals (instead of --requests)")
    p.add_argument("--prompt-mean", type=float, help="lognormal prompt mean (tokens)")
    p.add_argument("--output-mean", type=float, help="lognormal output mean (tokens)")
    p.add_argument("--seed", type=int, help="random seed")
    p.add_argument("-o", "--out", type=Path, help="output file; stats are printed without it")
    p.add_argument("--plot", type=Path, help="write a PNG of arrivals and lengths")


def handle_trace(args: argparse.Namespace) -> int:
    """Dispatch a `trace` action; TraceError becomes a one-line message and exit status 2."""
    if not args.trace_cmd:
        print("schedsim trace: choose an action (see --help)", file=sys.stderr)
        return 1
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", T.TraceWarning)
            code = _ACTIONS.get(args.trace_cmd, _load_and_emit)(args)
        for w in caught:
            print(f"warning: {w.message}", file=sys.stderr)
        return code
    except T.TraceError as exc:
        print(f"schedsim trace {args.trace_cmd}: error: {exc}", file=sys.stderr)
        return 2


def read_config(path: Path | None) -> dict[str, Any]:
    """JSON or TOML by suffix; a broken config is a TraceError naming the file."""
    if path is None:
        return {}
    try:
        text = path.read_text(encoding="utf-8")
        return tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (OSError, ValueError) as exc:
        raise T.TraceError(f"unreadable config: {exc}", str(path)) from None


def _parse_map(text: str | None) -> dict[str, str] | None:
    """'a=b,c=d' -> {'a': 'b', 'c': 'd'}."""
    if not text:
        return None
    pairs = [item.split("=", 1) for item in text.split(",") if item.strip()]
    if any(len(p) != 2 or not p[0].strip() or not p[1].strip() for p in pairs):
        raise T.TraceError(f"--map wants workload_column=file_column pairs, got {text!r}", field="map")
    return {k.strip(): v.strip() for k, v in pairs}


def load_from_args(args: argparse.Namespace) -> Any:
    """Config-file options, overridden by flags, passed to load_workload."""
    opts = read_config(getattr(args, "config", None))
    flags = {
        "sort": args.sort,
        "skip_bad": args.skip_bad,
        "window": tuple(args.window) if args.window else None,
        "model": getattr(args, "model", None),
        "log_type": getattr(args, "log_type", None),
        "mapping": _parse_map(getattr(args, "map", None)),
        "time_unit": getattr(args, "time_unit", None),
        "block_size": getattr(args, "hash_block_size", None),
    }
    opts.update({k: v for k, v in flags.items() if v is not None})
    if "window" in opts:
        opts["window"] = tuple(opts["window"])
    fmt = opts.pop("format", "auto") if args.format == "auto" else args.format
    opts.pop("format", None)
    return T.load_workload(args.spec, format=fmt, **opts)


def apply_transforms(df: Any, args: argparse.Namespace) -> Any:
    """--filter, --sample, --rate, --max-requests (and -n for head), in that order."""
    if getattr(args, "filter", None):
        df = T.filter_rows(df, args.filter)
    if getattr(args, "sample", None) is not None:
        s = args.sample
        df = T.sample(df, n=int(s), seed=args.seed) if s >= 1 else T.sample(df, frac=s, seed=args.seed)
    if getattr(args, "rate", None) is not None:
        df = T.scale_rate(df, args.rate)
    if getattr(args, "max_requests", None) is not None:
        df = T.head(df, args.max_requests)
    if args.trace_cmd == "head":
        df = T.head(df, args.n)
    return df


def _emit(df: Any, args: argparse.Namespace) -> int:
    """Write -o if given, else print stats (or the rows, for head)."""
    out = getattr(args, "out", None)
    if out is not None:
        T.write_workload(df, out)
        print(f"wrote {len(df)} requests to {out}")
    elif args.trace_cmd == "head":
        print(df.to_string(index=False, max_colwidth=40))
    else:
        print(T.trace_stats(df).to_text())
    if getattr(args, "plot", None):
        print(f"plot: {T.plot_workload(df, args.plot)}")
    return 0


def _load_and_emit(args: argparse.Namespace) -> int:
    """convert, head and the per-format loaders."""
    return _emit(apply_transforms(load_from_args(args), args), args)


def _stats(args: argparse.Namespace) -> int:
    """The summary, as text or JSON, plus the optional plot."""
    df = load_from_args(args)
    st = T.trace_stats(df, block_size=args.sim_block_size)
    if args.json:
        print(json.dumps(st.summary.iloc[0].to_dict(), default=str, indent=1))
    else:
        print(st.to_text())
    if args.plot:
        print(f"plot: {T.plot_workload(df, args.plot)}")
    return 0


def _generate(args: argparse.Namespace) -> int:
    """Config first, flags override the arrival process, size, lengths of class 0, and seed."""
    cfg = read_config(args.config)
    arrival = dict(cfg.get("arrival", {}))
    for key, val in (("process", args.process), ("rate", args.rate), ("cv", args.cv)):
        if val is not None:
            arrival[key] = val
    cfg["arrival"] = arrival
    if args.requests is not None or args.duration is not None:
        cfg["num_requests"], cfg["duration_s"] = args.requests, args.duration
    if args.seed is not None:
        cfg["seed"] = args.seed
    classes = [dict(c) for c in cfg.get("classes", [{}])]
    for key, val in (("prompt", args.prompt_mean), ("output", args.output_mean)):
        if val is not None:
            classes[0][key] = {"dist": "lognormal", "mean": val, "cv": 1.0}
    cfg["classes"] = classes
    df = T.generate_workload(T.spec_from_dict(cfg))
    return _emit(df, args)


def _concat(args: argparse.Namespace) -> int:
    """Load each spec (auto format) and join them."""
    parts = [T.load_workload(s) for s in args.specs]
    df = T.concat(parts, mode=args.mode, gap=args.gap)
    T.write_workload(df, args.out)
    print(f"wrote {len(df)} requests to {args.out}")
    return 0


_ACTIONS = {"stats": _stats, "generate": _generate, "concat": _concat}
