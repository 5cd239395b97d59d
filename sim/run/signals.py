"""Ctrl-C belongs to the main process: helper processes (the plot worker, a sweep's pool) start
with it ignored, so they print nothing and the main process stops them and says what was kept."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """Ignore SIGINT while helper processes are started (forked or spawned, they inherit the
    ignored disposition from their first instruction), then restore the caller's handler."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may change handlers; helpers started elsewhere keep theirs
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
