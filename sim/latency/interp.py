"""Monotone piecewise-linear curves over a measured grid, with a one-time warning past the grid."""

from __future__ import annotations

import warnings
from bisect import bisect_right
from collections.abc import Sequence


class ExtrapolationWarning(UserWarning):
    """A prediction left the measured grid (the value is scaled from the last grid point)."""


def isotonic(ys: Sequence[float]) -> list[float]:
    """Least-squares non-decreasing fit (pool adjacent violators); measurement noise must not make
    more tokens look cheaper."""
    blocks: list[list[float]] = []  # [sum, count]
    for y in ys:
        blocks.append([float(y), 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    out: list[float] = []
    for s, c in blocks:
        out.extend([s / c] * int(c))
    return out


class Curve:
    """y(x) through (x_i, y_i): exact on grid points, linear and monotone between them.

    Below the grid the first value is used; past it the value grows in proportion to x (the
    operators are linear in tokens / bytes once the GPU is saturated), with a warning, once.
    """

    __slots__ = ("name", "xs", "ys", "warn", "_warned")

    def __init__(
        self,
        xs: Sequence[float],
        ys: Sequence[float],
        name: str = "curve",
        monotone: bool = True,
        warn: bool = True,
    ) -> None:
        if len(xs) != len(ys) or len(xs) == 0:
            raise ValueError(f"{name}: need equally many x and y values, at least one")
        pairs = sorted(zip([float(x) for x in xs], [float(y) for y in ys], strict=True))
        self.xs = [x for x, _ in pairs]
        if any(b <= a for a, b in zip(self.xs, self.xs[1:], strict=False)):
            raise ValueError(f"{name}: duplicate x values in the grid")
        ys_sorted = [y for _, y in pairs]
        self.ys = isotonic(ys_sorted) if monotone else ys_sorted
        self.name = name
        self.warn = warn  # False when the owner warns once for all its curves
        self._warned = False

    def __call__(self, x: float) -> float:
        xs, ys = self.xs, self.ys
        if x <= xs[0]:
            return ys[0]
        if x >= xs[-1]:
            if x > xs[-1]:
                self._warn(x)
                return ys[-1] * x / xs[-1]
            return ys[-1]
        i = bisect_right(xs, x)
        x0, x1 = xs[i - 1], xs[i]
        return ys[i - 1] + (ys[i] - ys[i - 1]) * (x - x0) / (x1 - x0)

    def _warn(self, x: float) -> None:
        if self.warn and not self._warned:
            self._warned = True
            warnings.warn(
                f"{self.name}: {x:g} is past the measured grid (max {self.xs[-1]:g}); "
                f"scaling the last measurement linearly",
                ExtrapolationWarning,
                stacklevel=3,
            )
