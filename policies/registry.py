"""The policy registry: plain string names -> policies, extended from outside the package.

Policies register with `register_policy(name, description, ConfigClass)`. Other packages add their
own through the `schedsim.policies` entry-point group (each entry point names a module whose
import registers its policies; they are loaded on the first lookup), or by naming a module to
import (`load_plugins`, RunConfig.plugins, `--plugin` on the command line).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .config import SchedulerConfig
from .interface import Policy
from .plugin_registry import PluginRegistry, build_from_options

ENTRY_POINT_GROUP = "schedsim.policies"


@dataclass(frozen=True)
class PolicyInfo:
    """A registered policy: its name, one line for `schedsim policies`, its config and factory."""

    name: str
    description: str
    config_cls: type[SchedulerConfig]
    factory: Callable[[Any], Policy]

    def make(self, **options: Any) -> Policy:
        """Build the policy from keyword options, rejecting unknown ones by name."""
        policy: Policy = build_from_options("policy", self.name, self.config_cls, self.factory, options)
        return policy


REGISTRY: PluginRegistry[PolicyInfo] = PluginRegistry("policy", ENTRY_POINT_GROUP)


def register_policy(
    name: str, description: str, config_cls: type[SchedulerConfig] = SchedulerConfig
) -> Callable[[Any], Any]:
    """Class or factory decorator: `@register_policy("vllm", "...", VllmConfig)`."""

    def deco(factory: Any) -> Any:
        REGISTRY.add(PolicyInfo(name, description, config_cls, factory))
        return factory

    return deco


def get_policy_info(name: str) -> PolicyInfo:
    """Look a policy up by name, listing the known names on a miss."""
    return REGISTRY.get(name)


def make_policy(name: str, **options: Any) -> Policy:
    """Build a registered policy by name."""
    return get_policy_info(name).make(**options)


def list_policies() -> list[PolicyInfo]:
    """Every registered policy, sorted by name."""
    return REGISTRY.all()


def load_plugins(modules: Iterable[str]) -> None:
    """Import modules that register policies (their import calls register_policy)."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ValueError(f"plugin module {name!r} cannot be imported: {exc}") from None
