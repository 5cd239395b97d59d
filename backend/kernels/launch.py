"""A kernel launch described before it runs, so the ahead-of-time compile check builds exactly the
variant (argument types, divisibility, constexprs, warps, stages) that the launcher would run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Launch:
    """One Triton launch: kernel, grid, positional arguments and keyword constexprs/options."""

    kernel: Any  # a triton.jit function (JITFunction, or InterpretedFunction under TRITON_INTERPRET=1)
    grid: tuple[int, ...]
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)  # constexprs plus num_warps / num_stages

    def __post_init__(self) -> None:
        """Refuse an empty or negative grid: Triton would launch nothing or fail deep inside."""
        if not self.grid or min(self.grid) < 1:
            raise ValueError(f"Launch of {self.name}: grid must be non-empty and >= 1, got {self.grid}")

    @property
    def name(self) -> str:
        """The kernel's function name, for reports."""
        fn = getattr(self.kernel, "fn", self.kernel)
        return getattr(fn, "__name__", repr(fn))

    def run(self) -> None:
        """Launch on the current device and stream."""
        self.kernel[self.grid](*self.args, **self.kwargs)


def run_all(launches: list[Launch]) -> None:
    """Launch in order (a plan's launches depend on each other only through memory, in order)."""
    for launch in launches:
        launch.run()
