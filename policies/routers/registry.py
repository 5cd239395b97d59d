"""The router registry: plain string names -> routers, extended from outside the package.

Routers register with `register_router(name, description, ConfigClass)`, exactly like policies
(`schedsim.policies.registry`). Other packages add their own through the `schedsim.routers`
entry-point group (each entry point names a module whose import registers its routers; they load
on the first lookup), or by naming a module to import (RunConfig.plugins, `--plugin`).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from .interface import Router

ROUTER_ENTRY_POINT_GROUP = "schedsim.routers"


@dataclass(frozen=True)
class RouterConfig:
    """Knobs every router shares."""

    seed: int = 0  # seed of the router's own draws (random, power-of-two choices)

    def __post_init__(self) -> None:
        """Reject impossible values, naming the field."""
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"RouterConfig.seed must be an integer >= 0, got {self.seed!r}")


@dataclass(frozen=True)
class RouterInfo:
    """A registered router: its name, one line for listings, its config and factory."""

    name: str
    description: str
    config_cls: type[RouterConfig]
    factory: Callable[[Any], Router]

    def make(self, **options: Any) -> Router:
        """Build the router from keyword options, rejecting unknown ones by name."""
        known = {f.name for f in dataclasses.fields(self.config_cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"router {self.name!r}: unknown option(s) {unknown}; known: {sorted(known)}")
        return self.factory(self.config_cls(**options))


_REGISTRY: dict[str, RouterInfo] = {}
_ENTRY_POINTS_LOADED: list[bool] = []
_FAILED_PLUGINS: dict[str, str] = {}  # entry point name -> why its module did not import


def register_router(
    name: str, description: str, config_cls: type[RouterConfig] = RouterConfig
) -> Callable[[Any], Any]:
    """Class or factory decorator: `@register_router("round-robin", "...")`."""

    def deco(factory: Any) -> Any:
        if name in _REGISTRY:
            raise ValueError(f"router {name!r} registered twice")
        _REGISTRY[name] = RouterInfo(name, description, config_cls, factory)
        return factory

    return deco


def get_router_info(name: str) -> RouterInfo:
    """Look a router up by name, listing the known names on a miss."""
    load_router_entry_points()
    try:
        return _REGISTRY[name]
    except KeyError:
        broken = "".join(f"; plugin {p!r} failed to load: {why}" for p, why in _FAILED_PLUGINS.items())
        raise ValueError(f"unknown router {name!r}; known: {sorted(_REGISTRY)}{broken}") from None


def make_router(name: str, **options: Any) -> Router:
    """Build a registered router by name."""
    return get_router_info(name).make(**options)


def list_routers() -> list[RouterInfo]:
    """Every registered router, sorted by name."""
    load_router_entry_points()
    return [_REGISTRY[n] for n in sorted(_REGISTRY)]


def load_router_entry_points() -> None:
    """Import every module the `schedsim.routers` entry points name (once per process); one that
    fails to import is named in a warning and in a missed lookup's error, the others still load."""
    if _ENTRY_POINTS_LOADED:
        return
    _ENTRY_POINTS_LOADED.append(True)
    for ep in entry_points(group=ROUTER_ENTRY_POINT_GROUP):
        try:
            ep.load()
        except Exception as exc:  # any import-time failure of third-party code
            _FAILED_PLUGINS[ep.name] = f"{ep.value}: {type(exc).__name__}: {exc}"
            warnings.warn(
                f"schedsim: router plugin {ep.name!r} ({ep.value}) failed to load: {exc}", stacklevel=2
            )
