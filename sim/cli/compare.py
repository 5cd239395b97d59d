"""`schedsim compare`: several policies or configs on one workload and seed, side by side."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from schedsim.cli.args import add_run_arguments, resolve_run_config
from schedsim.cli.rejections import add_strict_argument, report_rejections
from schedsim.outputs.folder import OutputFolder, chosen_out
from schedsim.run.rejections import max_model_len_of, rejections, unfinished
from schedsim.run.resolve import check_config


def add_parser(sub: Any) -> None:
    """Register `compare`."""
    p = sub.add_parser("compare", help="several policies/configs on one workload, side by side")
    add_run_arguments(p, "runs/compare-<YYYYmmdd-HHMMSS>")
    p.add_argument(
        "--policies",
        nargs="+",
        default=[],
        metavar="NAME",
        help="policies to compare on the same workload and seed (space or comma separated)",
    )
    p.add_argument(
        "--variant",
        action="append",
        type=Path,
        default=[],
        metavar="FILE.toml",
        help="a config to compare: RunConfig keys overlaid on the base run, which it inherits "
        "otherwise (policy included); repeatable; labelled by the file's stem",
    )
    p.add_argument("--no-plots", action="store_true", help="skip the overlaid PNG plots")
    add_strict_argument(p)
    p.set_defaults(func=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    """Run the variants on one workload and print them side by side."""
    base = resolve_run_config(args)
    from schedsim.experiments.compare import (  # lazy subcommand
        compare_table,
        format_side_by_side,
        make_variants,
        run_variants,
        write_compare,
    )

    variants = make_variants(base, args.policies, args.variant)
    for label, config in variants:
        check_config(config, f"variant {label!r}")
    folder = OutputFolder(*chosen_out(args.out, "compare"))
    with folder as tmp:  # the lock and the write probe, before simulating
        results = run_variants(variants, progress=not args.no_progress)
        table = compare_table(results)
        write_compare(results, table, tmp, plots=not args.no_plots)
    print(format_side_by_side(table))
    print(f"\nwrote {folder.final}/ (compare.parquet, per-variant tables, cdf_latency.png, over_time.png)")
    rows = table.set_index("label").to_dict("index")
    found = [(f"variant {label!r}", rejections(rows[label], max_model_len_of(c))) for label, c in variants]
    cut = [(f"variant {label!r}", unfinished(rows[label])) for label, _ in variants]
    return report_rejections(found, args.strict, cut)
