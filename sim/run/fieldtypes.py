"""Values checked against their dataclass field's annotation, so a wrong type (`"yes"` for a bool,
`"4"` for a rate, a string policy option) fails naming the field and the value instead of being
taken as truthy or failing later inside a comparison."""

from __future__ import annotations

import dataclasses
import functools
import numbers
import types
import typing
from collections.abc import Mapping
from typing import Any

from schedsim.run.toml_config import ConfigError, field_types

NONE = type(None)


def _union_args(tp: Any) -> tuple[Any, ...] | None:
    """The members of `X | Y` (typing.Union or PEP 604), else None."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return typing.get_args(tp)
    return None


def describe(tp: Any) -> str:
    """The annotation in the words of a TOML file: 'true, false or none', 'an integer', ..."""
    words = _alternatives(tp)
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def _alternatives(tp: Any) -> list[str]:
    """The accepted kinds of value, one phrase each (a union or a Literal lists several)."""
    members = _union_args(tp)
    if members is not None:
        return [word for m in members for word in _alternatives(m)]
    origin = typing.get_origin(tp) or tp
    if tp is NONE:
        return ["none"]
    if tp is bool:
        return ["true", "false"]
    if origin is typing.Literal:
        return [repr(a) for a in typing.get_args(tp)]
    simple = {int: "an integer", float: "a number", str: "a string"}
    if tp in simple:
        return [simple[tp]]
    args = typing.get_args(tp)
    if origin in (list, tuple):
        return [f"a list of {_plural(args[0])}" if args else "a list"]
    if origin in (dict, Mapping):
        return [f"a table of {_plural(args[1])}" if len(args) == 2 and args[1] is not Any else "a table"]
    return [getattr(tp, "__name__", str(tp))]


def _plural(tp: Any) -> str:
    """'strings', 'numbers', ... for the element type of a list or table."""
    return {str: "strings", int: "integers", float: "numbers", bool: "booleans"}.get(tp, describe(tp))


def matches(tp: Any, value: Any) -> bool:
    """Whether `value` is a valid instance of the annotation (an int is a valid float; a bool is
    never a number)."""
    if tp is Any or tp is object:
        return True
    members = _union_args(tp)
    if members is not None:
        return any(matches(m, value) for m in members)
    if tp is NONE or tp is None:
        return value is None
    origin = typing.get_origin(tp) or tp
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if origin is typing.Literal:
        return value in typing.get_args(tp)
    if origin in (list, tuple):
        args = typing.get_args(tp)
        elem = args[0] if args else Any
        return isinstance(value, (list, tuple)) and all(matches(elem, v) for v in value)
    if origin in (dict, Mapping):
        args = typing.get_args(tp)
        key, val = args if len(args) == 2 else (Any, Any)
        return isinstance(value, Mapping) and all(
            matches(key, k) and matches(val, v) for k, v in value.items()
        )
    if isinstance(origin, type):
        return isinstance(value, origin)
    return True  # an annotation this checker does not model: the dataclass's own checks decide


def field_error(name: str, why: str, value: Any) -> ConfigError:
    """The one shape of a bad-value error: `<field>: <why> (got <value>)`."""
    return ConfigError(f"{name}: {why} (got {value!r})")


def check_value(name: str, tp: Any, value: Any) -> None:
    """Raise a ConfigError naming `name` when `value` is not of type `tp`."""
    if not matches(tp, value):
        raise field_error(name, f"expected {describe(tp)}", value)


@functools.lru_cache(maxsize=64)
def _hints(cls: type) -> dict[str, Any]:
    """A dataclass's resolved field annotations, computed once per class (sweeps build many)."""
    return field_types(cls)


def check_fields(cls: type, values: Mapping[str, Any], prefix: str = "") -> None:
    """Check each given value against `cls`'s field annotation (unknown names are left to the
    caller, which knows what else is allowed)."""
    hints = _hints(cls)
    for name, value in values.items():
        if name in hints:
            check_value(prefix + name, hints[name], value)


def check_instance(obj: Any) -> None:
    """Check every init field of a dataclass instance (its `__post_init__` calls this first)."""
    check_fields(type(obj), {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init})
