"""`schedsim policies`, `schedsim routers`, `schedsim models`, `schedsim gpus`: what a run can name."""

from __future__ import annotations

import argparse
from typing import Any

from schedsim.latency import get_gpu_spec, get_model_spec, list_gpu_specs, list_model_specs
from schedsim.policies import list_policies, load_plugins
from schedsim.policies.routers import list_routers


def add_parsers(sub: Any) -> None:
    """Register the listings."""
    p = sub.add_parser("policies", help="list registered policies (and those of --plugin modules)")
    _plugin_argument(p, "policies")
    p.set_defaults(func=cmd_policies)
    p = sub.add_parser("routers", help="list registered cluster routers (and those of --plugin modules)")
    _plugin_argument(p, "routers")
    p.set_defaults(func=cmd_routers)
    sub.add_parser("models", help="list shipped model specs").set_defaults(func=cmd_models)
    sub.add_parser("gpus", help="list shipped GPU specs").set_defaults(func=cmd_gpus)


def _plugin_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """--plugin MODULE...: imported first, so the listing shows what they register."""
    parser.add_argument(
        "--plugin",
        dest="plugins",
        nargs="*",
        default=[],
        metavar="MODULE",
        help=f"modules to import first (their import registers {what})",
    )


def cmd_policies(args: argparse.Namespace) -> int:
    """One line per registered policy."""
    load_plugins(args.plugins)
    infos = list_policies()
    width = max((len(i.name) for i in infos), default=0)
    for info in infos:
        print(f"{info.name:<{width}}  {info.description}")
    if not infos:
        print("no policies registered")
    return 0


def cmd_routers(args: argparse.Namespace) -> int:
    """One line per registered router."""
    load_plugins(args.plugins)
    infos = list_routers()
    width = max((len(i.name) for i in infos), default=0)
    for info in infos:
        print(f"{info.name:<{width}}  {info.description}")
    return 0


def model_lines() -> list[str]:
    """One line per shipped model spec."""
    lines = [
        f"{'name':15s} {'layers':>6s} {'hidden':>6s} {'heads':>5s} {'kv':>3s} {'params':>7s} "
        f"{'max_pos':>7s} {'tp':>2s}  hf_name"
    ]
    for name in list_model_specs():
        m = get_model_spec(name)
        lines.append(
            f"{name:15s} {m.num_layers:6d} {m.hidden_size:6d} {m.num_attention_heads:5d} "
            f"{m.num_key_value_heads:3d} {m.weight_params() / 1e9:6.1f}B "
            f"{m.max_position_embeddings:7d} {m.tp:2d}  {m.hf_name}"
        )
    return lines


def gpu_lines() -> list[str]:
    """One line per shipped GPU spec."""
    lines = [f"{'name':10s} {'mem_GiB':>7s} {'bf16_TFLOPs':>11s} {'HBM_GB/s':>8s} {'link_GB/s':>9s}"]
    for name in list_gpu_specs():
        g = get_gpu_spec(name)
        lines.append(
            f"{name:10s} {g.memory_gib:7.1f} {g.peak_tflops:11.1f} {g.hbm_gbps:8.0f} {g.nvlink_gbps:9.1f}"
        )
    return lines


def cmd_models(args: argparse.Namespace) -> int:
    """Print the shipped model specs."""
    print("\n".join(model_lines()))
    return 0


def cmd_gpus(args: argparse.Namespace) -> int:
    """Print the shipped GPU specs."""
    print("\n".join(gpu_lines()))
    return 0
