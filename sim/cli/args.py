"""Generate argparse flags from a config dataclass, so `--help` documents every knob from one place."""

from __future__ import annotations

import argparse
import dataclasses
import tomllib
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from schedsim.run.config import RunConfig
from schedsim.run.toml_config import field_types, resolve

# RunConfig fields whose flag is not `--<field-name>`: the name the trace tools already use.
RUN_FLAG_NAMES = {"plugins": "--plugin", "trace_sort": "--sort", "trace_skip_bad": "--skip-bad"}


def parse_scalar(text: str) -> Any:
    """A CLI value as TOML would read it (1 → int, 0.5 → float, true → bool), else the raw string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_key_value(text: str) -> tuple[str, Any]:
    """`key=value` → (key, typed value); a missing '=' is an error naming the argument."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), parse_scalar(value.strip())


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    """`X | None` → (X, True); anything else → (tp, False)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _converter(tp: Any, optional: bool) -> Any:
    """The argparse `type=` for a field type; 'none' means None for optional fields."""
    base: Callable[[str], Any] | None = {int: int, float: float, str: str}.get(tp)
    if typing.get_origin(tp) is typing.Literal:
        base = str
    if base is None:
        base = parse_scalar

    def convert(text: str) -> Any:
        """One CLI token to the field's type."""
        if optional and text.lower() in ("none", "null"):
            return None
        return base(text)

    convert.__name__ = getattr(base, "__name__", "value")
    return convert


def flag_name(dest: str) -> str:
    """`max_num_seqs` → `--max-num-seqs`; nested `scheduler.block_size` → `--scheduler-block-size`."""
    return "--" + dest.replace(".", "-").replace("_", "-")


def _help(field: dataclasses.Field, default: Any) -> str:
    """Field help from its metadata plus its default."""
    text = field.metadata.get("help", "") if field.metadata else ""
    if default is not dataclasses.MISSING:
        text = f"{text} (default: {default!r})" if text else f"default: {default!r}"
    return text.replace("%", "%%")


def _default(field: dataclasses.Field) -> Any:
    """The field's default value, calling a default_factory."""
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def add_dataclass_flags(
    parser: argparse.ArgumentParser | Any,
    cls: type,
    prefix: str = "",
    skip: tuple[str, ...] = (),
    rename: Mapping[str, str] | None = None,
) -> list[str]:
    """Add one flag per field (nested dataclasses flattened); returns the dotted dests added.

    `rename` maps a field to another flag where a command's own flag takes the natural name.
    """
    dests: list[str] = []
    hints = field_types(cls)
    for field in dataclasses.fields(cls):
        if not field.init or field.name in skip:
            continue
        dest = prefix + field.name
        tp, optional = _unwrap_optional(hints[field.name])
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            group = parser.add_argument_group(f"{field.name} options")
            dests += add_dataclass_flags(group, tp, dest + ".")
            continue
        kw: dict[str, Any] = {
            "dest": dest,
            "default": argparse.SUPPRESS,
            "help": _help(field, _default(field)),
        }
        origin = typing.get_origin(tp) or tp
        if tp is bool:
            kw["action"] = argparse.BooleanOptionalAction
        elif origin in (dict, Mapping):
            kw.update(action="append", type=parse_key_value, metavar="KEY=VALUE")
        elif origin in (list, tuple):
            args = typing.get_args(tp)
            kw.update(nargs="*", type=str if args and args[0] is str else parse_scalar)
        else:
            kw.update(type=_converter(tp, optional), metavar=field.name.split(".")[-1].upper())
            if typing.get_origin(tp) is typing.Literal:
                kw["choices"] = list(typing.get_args(tp))
        parser.add_argument((rename or {}).get(dest, flag_name(dest)), **kw)
        dests.append(dest)
    return dests


def collect_overrides(ns: argparse.Namespace, dests: list[str]) -> dict[str, Any]:
    """The flags actually given, as a nested mapping ready to merge over a TOML file."""
    out: dict[str, Any] = {}
    for dest in dests:
        if not hasattr(ns, dest):
            continue
        value = getattr(ns, dest)
        if isinstance(value, list) and value and isinstance(value[0], tuple):
            value = dict(value)
        node = out
        *parents, leaf = dest.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def add_run_arguments(
    parser: argparse.ArgumentParser, out_default: str, rename: dict[str, str] | None = None
) -> list[str]:
    """Flags shared by run/compare/sweep/validate: --config, one flag per RunConfig field,
    --policy-option, --out, --no-progress; returns the RunConfig dests added.

    `out_default` describes the folder written without --out (the command picks it)."""
    parser.add_argument(
        "--config",
        metavar="FILE.toml",
        type=Path,
        help="TOML file of RunConfig keys; flags given on the command line override it",
    )
    group = parser.add_argument_group("run configuration (RunConfig; every key can also go in --config)")
    dests = add_dataclass_flags(
        group, RunConfig, skip=("policy_options",), rename={**RUN_FLAG_NAMES, **(rename or {})}
    )
    meta: Mapping[str, Any] = {f.name: f.metadata for f in dataclasses.fields(RunConfig)}.get(
        "policy_options", {}
    )
    group.add_argument(
        "--policy-option",
        dest="policy_option_pairs",
        action="append",
        type=parse_key_value,
        metavar="KEY=VALUE",
        default=[],
        help=f"{meta.get('help', 'a policy option')}; repeatable, e.g. "
        "--policy-option long_prefill_token_threshold=512",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"output directory, written whole or not at all (default: {out_default})",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.set_defaults(run_dests=dests)
    return dests


def resolve_run_config(
    args: argparse.Namespace, section: str | None = None, ignore: tuple[str, ...] = ()
) -> RunConfig:
    """RunConfig from defaults, then --config, then the flags actually given."""
    overrides = collect_overrides(args, args.run_dests)
    pairs = dict(args.policy_option_pairs)
    if pairs:  # --policy-option flags merge over the file's [policy_options] table
        overrides["policy_options"] = pairs
    config: RunConfig = resolve(RunConfig, args.config, overrides, section=section, ignore=ignore)
    return config
