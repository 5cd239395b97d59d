"""The heap during a run: glibc kept from fragmenting it, the cyclic collector's passes few.

The recorder's columns are `array.array`s that grow by realloc to hundreds of MB in long runs.
glibc raises its mmap threshold each time a large mmapped block is freed (up to 32 MiB), after
which growing columns are copied around the brk heap and leave holes behind: on a generated
20,000-request run that was ~0.65 KiB of RSS per request on top of ~1.2 KiB of data. Pinning
the threshold (mallopt M_MMAP_THRESHOLD, which also turns off the dynamic adjustment) keeps every
block above it in its own mapping, grown in place by mremap. Measured speed is unchanged.

`frozen_setup` keeps what exists before a run out of the collector's passes and makes its young
passes rarer while the run goes on.
"""

from __future__ import annotations

import ctypes
import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
THRESHOLD = 128 * 1024  # glibc's initial value
_pinned = False
# What a run's objects hold (a request's Request, lists and table rows) lives as long as the
# request, so a young-generation pass every 700 allocations (CPython's default) only hands them
# on to the older generations' passes: 0.012-0.024 s of collection in a saturated whole-trace run,
# 0.003 s at this threshold (bench/RESULTS.md).
YOUNG_GENERATION_THRESHOLD = 20_000


def pin_mmap_threshold(threshold: int = THRESHOLD) -> bool:
    """Pin glibc's mmap threshold once per process; False where there is no glibc."""
    global _pinned
    if _pinned:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        _pinned = bool(libc.mallopt(M_MMAP_THRESHOLD, threshold))
    except (OSError, AttributeError):
        return False
    return _pinned


def release_unused() -> None:
    """Hand memory freed by loading a workload back to the OS before a long run.

    pyarrow's allocator (mimalloc) keeps what a generated or parsed trace freed (~150 MB for a
    million generated requests) unless asked; glibc's heap is trimmed too.
    """
    pa = sys.modules.get("pyarrow")
    if pa is not None:
        pa.default_memory_pool().release_unused()
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None).malloc_trim(0)
        except (OSError, AttributeError):
            pass


@contextmanager
def frozen_setup() -> Iterator[None]:
    """Keep the objects that exist before a run (modules, the workload) out of the cyclic
    collector's passes during it (gc.freeze), and hand them back after: a run allocates
    millions of short-lived objects, and each full collection would otherwise walk them all.
    Young passes come every YOUNG_GENERATION_THRESHOLD allocations during the run, not 700."""
    gc.freeze()
    before = gc.get_threshold()
    gc.set_threshold(max(before[0], YOUNG_GENERATION_THRESHOLD), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
