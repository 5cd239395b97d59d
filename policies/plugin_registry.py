"""A registry of named components (policies, routers) that other packages extend through an
entry-point group: one mechanism, so a policy plugin and a router plugin load and fail alike."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, Generic, Protocol, TypeVar


class Named(Protocol):
    """What the registry keeps of a component: its name."""

    @property
    def name(self) -> str: ...


InfoT = TypeVar("InfoT", bound=Named)


def build_from_options(
    kind: str, name: str, config_cls: type, factory: Callable[[Any], Any], options: dict[str, Any]
) -> Any:
    """Build a component from keyword options for its config dataclass, rejecting unknown ones by name."""
    known = {f.name for f in dataclasses.fields(config_cls)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"{kind} {name!r}: unknown option(s) {unknown}; known: {sorted(known)}")
    return factory(config_cls(**options))


class PluginRegistry(Generic[InfoT]):
    """Names -> infos of one kind of component; the entry-point group's modules are imported on
    the first lookup. A plugin that fails to import is named in a warning (and in the error of a
    lookup that misses), and the others still load: one broken installation stops no run."""

    def __init__(self, kind: str, group: str) -> None:
        self.kind = kind  # "policy", "router": the word the messages use
        self.group = group
        self.infos: dict[str, InfoT] = {}
        self.loaded = False
        self.failed: dict[str, str] = {}  # entry point name -> why its module did not import

    def add(self, info: InfoT) -> None:
        """Register one component; a name is registered once."""
        if info.name in self.infos:
            raise ValueError(f"{self.kind} {info.name!r} registered twice")
        self.infos[info.name] = info

    def get(self, name: str) -> InfoT:
        """Look a component up by name, listing the known names (and broken plugins) on a miss."""
        self.load_entry_points()
        try:
            return self.infos[name]
        except KeyError:
            broken = "".join(f"; plugin {p!r} failed to load: {why}" for p, why in self.failed.items())
            raise ValueError(f"unknown {self.kind} {name!r}; known: {sorted(self.infos)}{broken}") from None

    def all(self) -> list[InfoT]:
        """Every registered component, sorted by name."""
        self.load_entry_points()
        return [self.infos[n] for n in sorted(self.infos)]

    def load_entry_points(self) -> None:
        """Import every module the entry-point group names, once per process."""
        if self.loaded:
            return
        self.loaded = True
        for ep in entry_points(group=self.group):
            try:
                ep.load()
            except Exception as exc:  # any import-time failure of third-party code
                self.failed[ep.name] = f"{ep.value}: {type(exc).__name__}: {exc}"
                warnings.warn(
                    f"schedsim: {self.kind} plugin {ep.name!r} ({ep.value}) failed to load: {exc}",
                    stacklevel=3,
                )
