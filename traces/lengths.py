"""Seeded token-length distributions: fixed, uniform, lognormal, empirical resampling."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import TraceError
from .sources import load_file

_DISTS = ("fixed", "uniform", "lognormal", "empirical")


@dataclass
class LengthSpec:
    """A token-length distribution, clipped to [min, max] and rounded to whole tokens."""

    dist: str = "fixed"
    value: int = 128  # fixed
    low: int = 1  # uniform (inclusive)
    high: int = 1024
    mean: float = 512.0  # lognormal, parameterised by mean and CV
    cv: float = 1.0
    trace: str | None = None  # empirical: a load_workload spec ...
    column: str = "prompt_tokens"  # ... and which of its columns to resample
    values: list[int] = field(default_factory=list)  # empirical: explicit sample
    min: int = 1
    max: int | None = None

    def __post_init__(self) -> None:
        """Validate eagerly so a typo in a config names its field."""
        if self.dist not in _DISTS:
            raise TraceError(f"dist must be one of {_DISTS}, got {self.dist!r}", field="dist")
        if self.min < 1 or (self.max is not None and self.max < self.min):
            raise TraceError(f"need 1 <= min <= max, got {self.min}, {self.max}", field="min")
        if self.dist == "fixed" and self.value < 1:
            raise TraceError(f"value must be >= 1, got {self.value}", field="value")
        if self.dist == "uniform" and not 1 <= self.low <= self.high:
            raise TraceError(f"need 1 <= low <= high, got {self.low}, {self.high}", field="low")
        if self.dist == "lognormal" and not (self.mean > 0 and self.cv > 0):
            raise TraceError("lognormal needs mean > 0 and cv > 0", field="mean")
        if self.dist == "empirical" and not self.values and not self.trace:
            raise TraceError("empirical needs values or a trace", field="values")
        if self.column not in ("prompt_tokens", "output_tokens"):
            raise TraceError(
                f"column must be prompt_tokens or output_tokens, got {self.column!r}", field="column"
            )

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """`n` lengths as int64."""
        if self.dist == "fixed":
            x = np.full(n, float(self.value))
        elif self.dist == "uniform":
            x = rng.integers(self.low, self.high + 1, size=n).astype(float)
        elif self.dist == "lognormal":
            sigma2 = np.log1p(self.cv**2)
            x = rng.lognormal(np.log(self.mean) - sigma2 / 2, np.sqrt(sigma2), size=n)
        else:
            x = rng.choice(self._empirical(), size=n).astype(float)
        hi = self.max if self.max is not None else np.inf
        out: np.ndarray = np.clip(np.rint(x), self.min, hi).astype(np.int64)
        return out

    def _empirical(self) -> np.ndarray:
        """The resampling pool, loaded once from the named trace."""
        if self.values:
            return np.asarray(self.values, dtype=np.int64)
        if self.trace is None:  # __post_init__ requires values or a trace
            raise TraceError("empirical needs values or a trace", field="values")
        pool: np.ndarray = load_file(self.trace)[self.column].to_numpy()
        self.values = pool.tolist()
        return pool


def length_spec(obj: Any) -> LengthSpec:
    """A LengthSpec from a config value: an int (fixed), a dict, or a LengthSpec."""
    if isinstance(obj, LengthSpec):
        return obj
    if isinstance(obj, int) and not isinstance(obj, bool):
        return LengthSpec("fixed", value=obj)
    if isinstance(obj, dict):
        try:
            return LengthSpec(**obj)
        except TypeError as exc:
            raise TraceError(f"bad length spec {obj}: {exc}", field="length") from None
    raise TraceError(f"a length is an int or a dict, got {obj!r}", field="length")
