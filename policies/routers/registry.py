"""The router registry: plain string names -> routers, extended from outside the package.

Routers register with `register_router(name, description, ConfigClass)`, exactly like policies
(`schedsim.policies.registry`). Other packages add their own through the `schedsim.routers`
entry-point group (each entry point names a module whose import registers its routers; they load
on the first lookup), or by naming a module to import (RunConfig.plugins, `--plugin`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..plugin_registry import PluginRegistry, build_from_options
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
        router: Router = build_from_options("router", self.name, self.config_cls, self.factory, options)
        return router


REGISTRY: PluginRegistry[RouterInfo] = PluginRegistry("router", ROUTER_ENTRY_POINT_GROUP)


def register_router(
    name: str, description: str, config_cls: type[RouterConfig] = RouterConfig
) -> Callable[[Any], Any]:
    """Class or factory decorator: `@register_router("round-robin", "...")`."""

    def deco(factory: Any) -> Any:
        REGISTRY.add(RouterInfo(name, description, config_cls, factory))
        return factory

    return deco


def get_router_info(name: str) -> RouterInfo:
    """Look a router up by name, listing the known names on a miss."""
    return REGISTRY.get(name)


def make_router(name: str, **options: Any) -> Router:
    """Build a registered router by name."""
    return get_router_info(name).make(**options)


def list_routers() -> list[RouterInfo]:
    """Every registered router, sorted by name."""
    return REGISTRY.all()
