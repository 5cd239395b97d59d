"""The engine's inputs in simulated time: arrivals and client aborts, handed out when due."""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Callable, Sequence
from typing import Any, Final

import numpy as np
from schedsim.engine.waits import Inputs
from schedsim.policies import Request

# event kinds in the input stream
ARRIVAL: Final = 0
ABORT: Final = 1
UNBOUNDED: Final = 1 << 62  # longest_prompt where nothing bounds the prompts


class InputStream:
    """Arrivals and client aborts sorted by time; hands out what is due.

    Arrivals are either ready Requests or, with `make`, positions that `make` turns into a Request
    only when it is due: a million-request replay never holds a million Requests.
    """

    def __init__(
        self,
        arrivals: Sequence[Any],
        aborts: Sequence[tuple[float, str]],
        make: Callable[[int], Request] | None = None,
        longest_prompt: int | None = None,
    ) -> None:
        """arrivals: Requests, or (with `make`) arrival times; `longest_prompt`: a bound on their
        prompts' lengths, where known (exact fast-forward's policies may rely on it)."""
        if make is None:
            ready: list[Request] = list(arrivals)
            times = np.array([r.arrival_time for r in ready], dtype=float)
            make = ready.__getitem__
            longest_prompt = max((r.prompt_len for r in ready), default=0)
        else:
            times = np.asarray(arrivals, dtype=float)
        self.longest_prompt: int = UNBOUNDED if longest_prompt is None else longest_prompt
        abort_times = np.array([t for t, _ in aborts], dtype=float)
        all_times = np.concatenate([times, abort_times])
        kinds = np.concatenate(
            [np.full(len(times), ARRIVAL, dtype=np.int8), np.full(len(abort_times), ABORT, dtype=np.int8)]
        )
        refs = np.concatenate([np.arange(len(times)), np.arange(len(abort_times))])
        order = np.lexsort((refs, kinds, all_times))  # by time, arrivals before aborts, then order
        self.times: list[float] = all_times[order].tolist()
        self.kinds = array("b", kinds[order].tobytes())
        self.refs = array("q", refs[order].astype(np.int64).tobytes())
        self.abort_ids = [rid for _, rid in aborts]
        self.abort_at: list[int] = np.flatnonzero(kinds[order] == ABORT).tolist()  # their positions
        self.make: Callable[[int], Request] = make
        self.pos = 0

    def next_time(self) -> float | None:
        """Time of the next input, None when exhausted."""
        return self.times[self.pos] if self.pos < len(self.times) else None

    def next_abort_poll_time(self) -> float | None:
        """When an aborts-only poll would next take something: the next input if it is an abort
        (an arrival ahead of the aborts holds them back), None otherwise."""
        pos = self.pos
        return self.times[pos] if pos < len(self.times) and self.kinds[pos] == ABORT else None

    def next_abort_time(self) -> float | None:
        """Time of the next abort, wherever it stands behind arrivals; None when none is left."""
        j = bisect_left(self.abort_at, self.pos)
        return self.times[self.abort_at[j]] if j < len(self.abort_at) else None

    def take(self, now: float, aborts_only: bool = False) -> Inputs:
        """Inputs due by `now`; with aborts_only, requests due are left in the stream."""
        times, pos = self.times, self.pos
        n = len(times)
        out = Inputs()
        if pos >= n or times[pos] > now:
            return out  # nothing due (most polls)
        kinds, refs = self.kinds, self.refs
        while pos < n and times[pos] <= now:
            if kinds[pos] == ABORT:
                out.abort_ids.append(self.abort_ids[refs[pos]])
            elif aborts_only:
                break  # later aborts stay queued behind this arrival, in order
            else:
                out.requests.append(self.make(refs[pos]))
            pos += 1
        self.pos = pos
        return out
