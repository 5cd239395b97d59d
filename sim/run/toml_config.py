"""TOML run configs: load a file, reject unknown keys by name, and layer CLI overrides on top."""

from __future__ import annotations

import dataclasses
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A config file or override that cannot become a RunConfig; the message names file and key."""


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML file, turning parse errors into messages that name the file and line."""
    path = Path(path)
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None


def field_types(cls: type) -> dict[str, Any]:
    """Resolved type hints of a dataclass's init fields (postponed annotations included)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls) if f.init}


def check_keys(cls: type, data: Mapping[str, Any], source: str) -> None:
    """Fail on the first key that is not a field of `cls`, naming the key, source and known keys."""
    known = field_types(cls)
    for key in data:
        if key not in known:
            raise ConfigError(
                f"{source}: unknown key {key!r} (not a {cls.__name__} field); "
                f"known keys: {', '.join(sorted(known))}"
            )


def _is_dataclass_type(tp: Any) -> bool:
    """True for a dataclass class (nested config sections)."""
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def coerce(cls: type, data: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Check keys and build nested dataclass sections, so a bad nested key is named with its path."""
    check_keys(cls, data, source)
    types = field_types(cls)
    out: dict[str, Any] = {}
    for key, value in data.items():
        tp = types[key]
        if _is_dataclass_type(tp) and isinstance(value, Mapping):
            value = build(tp, value, f"{source} [{key}]")
        elif isinstance(value, Path):
            value = str(value)
        out[key] = value
    return out


def build(cls: type, data: Mapping[str, Any], source: str) -> Any:
    """Instantiate `cls` from a mapping; validation errors from __post_init__ keep the source name."""
    kwargs = coerce(cls, data, source)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: {exc}") from None


def merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Overlay `override` on `base`; nested tables merge key by key (CLI beats file beats default)."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def resolve(
    cls: type,
    file: str | Path | None,
    overrides: Mapping[str, Any],
    section: str | None = None,
    ignore: tuple[str, ...] = (),
) -> Any:
    """Defaults, then the TOML file (optionally one of its tables), then the overrides."""
    data: dict[str, Any] = {}
    source = "command line"
    if file is not None:
        data = load_toml(file)
        source = str(file)
        if section is not None:
            table = data.get(section, {})
            if not isinstance(table, Mapping):
                raise ConfigError(f"{file}: [{section}] must be a table")
            data = dict(table)
            source = f"{file} [{section}]"
        data = {k: v for k, v in data.items() if k not in ignore}
        check_keys(cls, data, source)
    check_keys(cls, overrides, "command line")
    return build(cls, merge(data, overrides), source)


def to_jsonable(obj: Any) -> Any:
    """A config (dataclass, tuple, Path) as plain JSON data, for config.json and run hashes."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    return str(obj)
