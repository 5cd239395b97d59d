"""`schedsim` command line: run, compare, sweep and the listings; other rooms' commands load lazily."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from schedsim.run.toml_config import ConfigError


def _run_config_cls() -> type:
    """RunConfig, imported late so that `schedsim --help` works even while the core is broken."""
    from schedsim.run.config import RunConfig

    return RunConfig


def add_run_arguments(parser: argparse.ArgumentParser, out_default: str | None,
                      rename: dict[str, str] | None = None) -> list[str]:
    """Flags shared by run/compare/sweep: --config, one flag per RunConfig field, --policy-option."""
    import dataclasses

    from schedsim.cli.args import add_dataclass_flags, parse_key_value

    parser.add_argument("--config", metavar="FILE.toml", type=Path,
                        help="TOML file of RunConfig keys; flags given on the command line override it")
    group = parser.add_argument_group("run configuration (RunConfig; every key can also go in --config)")
    cls = _run_config_cls()
    dests = add_dataclass_flags(group, cls, skip=("policy_options",), rename=rename)
    meta = {f.name: f.metadata for f in dataclasses.fields(cls)}.get("policy_options", {})
    group.add_argument("--policy-option", dest="policy_option_pairs", action="append",
                       type=parse_key_value, metavar="KEY=VALUE", default=[],
                       help=f"{meta.get('help', 'a policy option')}; repeatable, e.g. "
                            "--policy-option long_prefill_token_threshold=512")
    parser.add_argument("--out", type=Path, default=out_default, metavar="DIR",
                        help=f"output directory (default: {out_default})")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return dests


def resolve_run_config(args: argparse.Namespace, dests: list[str], section: str | None = None,
                       ignore: tuple[str, ...] = ()) -> Any:
    """RunConfig from defaults, then --config, then the flags actually given."""
    from schedsim.cli.args import collect_overrides
    from schedsim.run.toml_config import resolve

    cls = _run_config_cls()
    overrides = collect_overrides(args, dests)
    pairs = dict(args.policy_option_pairs)
    if pairs:  # --policy-option flags merge over the file's [policy_options] table
        overrides["policy_options"] = pairs
    return resolve(cls, args.config, overrides, section=section, ignore=ignore)


def check_config(config: Any, label: str = "config") -> None:
    """Resolve specs and build the policy up front, so a bad name fails before any simulation."""
    from schedsim.policies import make_policy
    from schedsim.run.resolve import resolve_run

    try:
        resolved = resolve_run(config)
        make_policy(config.policy, **resolved.policy_options)
    except (ValueError, KeyError) as exc:
        raise ConfigError(f"{label}: {exc.args[0] if exc.args else exc}") from None


def cmd_run(args: argparse.Namespace) -> int:
    """Replay one workload through one policy and write the output directory."""
    config = resolve_run_config(args, args._dests)  # config errors first, before heavy imports
    check_config(config)
    from schedsim.outputs.files import format_summary, write_run
    from schedsim.outputs.plot_worker import start_plot_worker
    from schedsim.run.simulate import simulate

    worker = start_plot_worker(not args.no_plots)  # imports matplotlib while this one simulates
    try:
        if args.backend == "real":  # the same policy and engine loop on the real model, in wall-clock time
            from schedsim.run.real import backend_options, run_real

            result = run_real(config, backend=backend_options(args))
        else:
            result = simulate(config, progress=not args.no_progress)
        write_run(result, args.out, plots=not args.no_plots, worker=worker)
    finally:
        if worker is not None:
            worker.close()
    print(format_summary(result.summary))
    print(f"\nwrote {args.out}/")
    return 0


def cmd_policies(args: argparse.Namespace) -> int:
    """One line per registered policy."""
    from schedsim.policies import list_policies

    infos = list_policies()
    width = max((len(i.name) for i in infos), default=0)
    for info in infos:
        print(f"{info.name:<{width}}  {info.description}")
    if not infos:
        print("no policies registered")
    return 0


def _list_specs(kind: str) -> int:
    """Print the shipped model or GPU specs (provided by the latency room)."""
    try:
        mod = importlib.import_module("schedsim.cli.latency")
    except ImportError as exc:
        print(f"schedsim {kind}: the latency models are not installed ({exc})", file=sys.stderr)
        return 2
    rows = mod.list_model_specs() if kind == "models" else mod.list_gpu_specs()
    for row in rows:
        print(row if isinstance(row, str) else "  ".join(str(x) for x in row))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """Run several policies/configs on one workload and print them side by side."""
    from schedsim.experiments.compare import run_compare

    return run_compare(args, resolve_run_config)


def cmd_sweep(args: argparse.Namespace) -> int:
    """Run a grid of configs, resumably, and plot each metric against the swept knob."""
    from schedsim.experiments.sweep import run_sweep_cli

    return run_sweep_cli(args, resolve_run_config)


def _add_backend_flags(parser: argparse.ArgumentParser, with_switch: bool = True) -> None:
    """`--backend sim|real` and the real backend's options (flags owned by sim/realtime_run.py)."""
    try:
        from schedsim.run.real import add_backend_arguments
    except Exception as exc:  # noqa: BLE001 - the simulator must work without the backend
        if with_switch:
            parser.add_argument("--backend", choices=("sim",), default="sim",
                                help=f"sim only: the real backend is unavailable ({exc})")
        return
    add_backend_arguments(parser, with_switch=with_switch)


def _missing(name: str, module: str, exc: BaseException) -> Callable[[argparse.Namespace], int]:
    """A command whose module is not importable: say so clearly instead of crashing the CLI."""

    def handler(args: argparse.Namespace) -> int:
        """Explain, on stderr, why the command cannot run."""
        print(f"schedsim {name}: not available in this installation "
              f"(module schedsim.{module} could not be imported: {exc})", file=sys.stderr)
        return 2

    return handler


def _add_lazy(sub: Any, names: dict[str, str], module: str, attr: str) -> None:
    """Let another room's module add its own subparsers; degrade to explanatory stub commands."""
    try:
        mod = importlib.import_module(f"schedsim.cli.{module}")
        getattr(mod, attr)(sub)
        return
    except Exception as exc:  # noqa: BLE001 - any import-time failure must not break the CLI
        error: BaseException = exc
    for name, help_text in names.items():
        if name in sub.choices:
            continue
        p = sub.add_parser(name, help=f"{help_text} [unavailable]", add_help=False)
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(func=_missing(name, module, error))


def _add_conformance(sub: Any) -> None:
    """`schedsim conformance SCENARIO.json ...` forwards its arguments to schedsim.conformance.vllm.main."""
    p = sub.add_parser("conformance", help="replay a scenario JSON through vllm/vllm-async and "
                       "print the step log", add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)

    def handler(args: argparse.Namespace) -> int:
        """Import the conformance runner only when asked for (it is another room's module)."""
        try:
            mod = importlib.import_module("schedsim.conformance.vllm")
        except Exception as exc:  # noqa: BLE001
            return _missing("conformance", "conformance", exc)(args)
        return int(mod.main(list(args.rest)) or 0)

    p.set_defaults(func=handler)


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree."""
    from schedsim.experiments.compare import add_compare_arguments
    from schedsim.experiments.sweep import add_sweep_arguments

    parser = argparse.ArgumentParser(
        prog="schedsim", description="A discrete-event simulator for LLM-serving schedulers: replay a "
        "workload through a scheduler policy on a modelled GPU and CPU, and compare policies.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p = sub.add_parser("run", help="replay a workload through one policy and write an output directory")
    p.set_defaults(func=cmd_run, _dests=add_run_arguments(p, "runs/run"))
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    _add_backend_flags(p)
    sub.add_parser("policies", help="list registered policies").set_defaults(func=cmd_policies)
    sub.add_parser("models", help="list shipped model specs").set_defaults(
        func=lambda a: _list_specs("models"))
    sub.add_parser("gpus", help="list shipped GPU specs").set_defaults(func=lambda a: _list_specs("gpus"))
    p = sub.add_parser("compare", help="several policies/configs on one workload, side by side")
    p.set_defaults(func=cmd_compare, _dests=add_run_arguments(p, "runs/compare"))
    add_compare_arguments(p)
    p = sub.add_parser("sweep", help="a grid of runs on a process pool or Ray, resumable")
    # `--engine` picks the sweep's executor here (process pool or Ray); the loop mode moves aside.
    p.set_defaults(func=cmd_sweep, _dests=add_run_arguments(p, "runs/sweep", {"engine": "--loop-engine"}))
    add_sweep_arguments(p)
    from schedsim.cli.validate import add_validate_parser

    add_validate_parser(sub, add_run_arguments, _add_backend_flags)
    _add_lazy(sub, {"trace": "inspect, convert and generate workloads"}, "trace", "add_trace_parser")
    _add_lazy(sub, {"latency": "predicted step time of one step shape",
                    "calibrate": "fit a latency model to measured profiles"},
              "latency", "add_latency_parsers")
    _add_conformance(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `schedsim` script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    from schedsim.traces import TraceError

    try:
        return int(args.func(args) or 0)
    except (ConfigError, TraceError) as exc:  # user input: one clear line, no traceback
        print(f"schedsim {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
