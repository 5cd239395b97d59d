"""The policy registry: plain string names -> policies, extended from outside the package.

Policies register with `register_policy(name, description, ConfigClass)`. Other packages add their
own through the `schedsim.policies` entry-point group (each entry point names a module whose
import registers its policies; they are loaded on the first lookup), or by naming a module to
import (`load_plugins`, RunConfig.plugins, `--plugin` on the command line).
"""

from __future__ import annotations

import dataclasses
import importlib
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from .config import SchedulerConfig
from .interface import Policy

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
        known = {f.name for f in dataclasses.fields(self.config_cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"policy {self.name!r}: unknown option(s) {unknown}; known: {sorted(known)}")
        return self.factory(self.config_cls(**options))


_REGISTRY: dict[str, PolicyInfo] = {}


def register_policy(
    name: str, description: str, config_cls: type[SchedulerConfig] = SchedulerConfig
) -> Callable[[Any], Any]:
    """Class or factory decorator: `@register_policy("vllm", "...", VllmConfig)`."""

    def deco(factory: Any) -> Any:
        if name in _REGISTRY:
            raise ValueError(f"policy {name!r} registered twice")
        _REGISTRY[name] = PolicyInfo(name, description, config_cls, factory)
        return factory

    return deco


def get_policy_info(name: str) -> PolicyInfo:
    """Look a policy up by name, listing the known names on a miss."""
    load_entry_points()
    try:
        return _REGISTRY[name]
    except KeyError:
        broken = "".join(f"; plugin {p!r} failed to load: {why}" for p, why in _FAILED_PLUGINS.items())
        raise ValueError(f"unknown policy {name!r}; known: {sorted(_REGISTRY)}{broken}") from None


def make_policy(name: str, **options: Any) -> Policy:
    """Build a registered policy by name."""
    return get_policy_info(name).make(**options)


def list_policies() -> list[PolicyInfo]:
    """Every registered policy, sorted by name."""
    load_entry_points()
    return [_REGISTRY[n] for n in sorted(_REGISTRY)]


_ENTRY_POINTS_LOADED: list[bool] = []
_FAILED_PLUGINS: dict[str, str] = {}  # entry point name -> why its module did not import


def load_entry_points() -> None:
    """Import every module the `schedsim.policies` entry points name (once per process). A plugin
    that fails to import is named in a warning (and in the error of a lookup that misses), and
    the others still load: one broken installation does not stop every run."""
    if _ENTRY_POINTS_LOADED:
        return
    _ENTRY_POINTS_LOADED.append(True)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except Exception as exc:  # any import-time failure of third-party code
            _FAILED_PLUGINS[ep.name] = f"{ep.value}: {type(exc).__name__}: {exc}"
            warnings.warn(
                f"schedsim: policy plugin {ep.name!r} ({ep.value}) failed to load: {exc}", stacklevel=2
            )


def load_plugins(modules: Iterable[str]) -> None:
    """Import modules that register policies (their import calls register_policy)."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ValueError(f"plugin module {name!r} cannot be imported: {exc}") from None
