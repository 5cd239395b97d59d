"""Seeded arrival processes: Poisson or Gamma renewal, modulated by on/off phases and bursts.

A renewal process with unit mean gap and the requested CV runs in "operational time"; the
cumulative intensity of a piecewise-constant rate r(t) maps it to wall time (time rescaling).
With a constant rate this is exactly a Poisson (cv = 1) or Gamma renewal process.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .errors import TraceError


@dataclass
class ArrivalSpec:
    """Arrival process: mean `rate` req/s (during on-phases), gap `cv`, phases and bursts."""

    process: str = "poisson"  # poisson | gamma
    rate: float = 1.0
    cv: float = 1.0  # coefficient of variation of gaps (gamma only)
    on_s: float | None = None  # on/off phases: rate during on, off_rate during off
    off_s: float | None = None
    off_rate: float = 0.0
    bursts: list[tuple[float, float, float]] = field(default_factory=list)  # (start, dur, factor)

    def __post_init__(self) -> None:
        """Name the bad field; a wrong process name would otherwise silently mean Poisson."""
        if self.process not in ("poisson", "gamma"):
            raise TraceError(
                f"process must be 'poisson' or 'gamma', got {self.process!r}", field="arrival.process"
            )
        if not (np.isfinite(self.rate) and self.rate > 0):
            raise TraceError(f"rate must be > 0, got {self.rate}", field="arrival.rate")
        if not (np.isfinite(self.cv) and self.cv > 0):
            raise TraceError(f"cv must be > 0, got {self.cv}", field="arrival.cv")
        if self.process == "poisson" and self.cv != 1.0:
            raise TraceError("a Poisson process has cv = 1; use process='gamma'", field="arrival.cv")
        if (self.on_s is None) != (self.off_s is None):
            raise TraceError("on_s and off_s go together", field="arrival.on_s")
        if self.on_s is not None and not (self.on_s > 0 and self.off_s >= 0):  # type: ignore[operator]
            raise TraceError("on_s must be > 0 and off_s >= 0", field="arrival.on_s")
        if self.off_rate < 0:
            raise TraceError(f"off_rate must be >= 0, got {self.off_rate}", field="arrival.off_rate")
        self.bursts = [tuple(map(float, b)) for b in self.bursts]  # type: ignore[misc]
        for start, dur, factor in self.bursts:
            if start < 0 or dur <= 0 or factor < 0:
                raise TraceError(
                    f"burst {(start, dur, factor)} needs start >= 0, duration > 0, factor >= 0",
                    field="arrival.bursts",
                )


def _pieces(spec: ArrivalSpec, horizon: float) -> tuple[np.ndarray, np.ndarray]:
    """Breakpoints and the rate on each piece, up to `horizon` (the last piece is open)."""
    edges = {0.0}
    if spec.on_s is not None:
        period = spec.on_s + spec.off_s  # type: ignore[operator]
        k = np.arange(int(horizon // period) + 2) * period
        edges.update(k.tolist())
        edges.update((k + spec.on_s).tolist())
    for start, dur, _ in spec.bursts:
        edges.update((start, start + dur))
    b = np.array(sorted(e for e in edges if e <= horizon) + [horizon])
    b = np.unique(b)
    mid = (b[:-1] + b[1:]) / 2 if len(b) > 1 else b
    return b, _rate_at(spec, mid)


def _rate_at(spec: ArrivalSpec, t: np.ndarray) -> np.ndarray:
    """The intensity r(t) of the modulated process."""
    r = np.full(len(t), spec.rate)
    if spec.on_s is not None:
        period = spec.on_s + spec.off_s  # type: ignore[operator]
        r = np.where((t % period) < spec.on_s, spec.rate, spec.off_rate)
    for start, dur, factor in spec.bursts:
        r = np.where((t >= start) & (t < start + dur), r * factor, r)
    return r


def _invert(spec: ArrivalSpec, s: np.ndarray) -> np.ndarray:
    """Wall times where the cumulative intensity reaches the operational times `s`."""
    horizon = max(1.0, float(s[-1]) / spec.rate * 2) if len(s) else 1.0
    for _ in range(64):
        b, r = _pieces(spec, horizon)
        lam = np.concatenate([[0.0], np.cumsum(np.diff(b) * r)])
        if len(s) == 0 or lam[-1] >= s[-1]:
            break
        horizon *= 2
    else:
        raise TraceError(
            "the rate is zero almost everywhere; no arrivals reach the target", field="arrival.rate"
        )
    i = np.clip(np.searchsorted(lam, s, side="right") - 1, 0, len(r) - 1)
    t: np.ndarray = b[i] + (s - lam[i]) / np.where(r[i] > 0, r[i], np.inf)
    return t


def arrival_times(
    spec: ArrivalSpec, rng: np.random.Generator, n: int | None = None, duration: float | None = None
) -> np.ndarray:
    """`n` arrivals, or all arrivals before `duration` seconds; the first gap is random too."""
    if (n is None) == (duration is None):
        raise TraceError("give exactly one of n and duration", field="num_requests")
    shape = 1.0 / spec.cv**2
    if n is not None:
        s = np.cumsum(rng.gamma(shape, 1.0 / shape, size=n))
        return _invert(spec, s)
    out: list[np.ndarray] = []
    total, last = 0.0, 0.0
    while True:
        batch = max(1024, int(spec.rate * duration * 1.1))  # type: ignore[operator]
        s = total + np.cumsum(rng.gamma(shape, 1.0 / shape, size=batch))
        total = float(s[-1])
        t = _invert(spec, s)
        out.append(t[t < duration])
        last = float(t[-1])
        if last >= duration:  # type: ignore[operator]
            return np.concatenate(out)
