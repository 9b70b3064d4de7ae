"""Giving the C heap's free memory back to the system once the server goes idle.

Python frees its objects, but glibc keeps the freed memory in its heaps for the next
allocation: RSS after a burst of work stays where the burst left it. Under the soak (64
clients, RELIABILITY.md "Soak") that was ×1.13-1.21 over the baseline, with no Python object
behind it (tracemalloc) and a plateau across rounds: kept, not leaked. `malloc_trim(0)` hands
the free pages of every heap back (`madvise`), so once no execution is running — the point
where the memory a burst used is freed — the server trims once.

The trim runs on a worker thread (ctypes releases the interpreter lock for it) and takes each
heap's lock in turn while it walks the heap (milliseconds for a few hundred MiB): only when
no execution runs, once per busy-to-idle change.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import platform
import time
from collections.abc import Callable, Mapping
from typing import Any

import anyio.to_thread

logger = logging.getLogger("shellgate.memory")

# How often the registry is looked at for running executions.
IDLE_CHECK_SECONDS = 0.5


def _libc_malloc_trim() -> Callable[[int], int] | None:
    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


_malloc_trim = _libc_malloc_trim()


def trim_free_memory() -> bool:
    """Return glibc's free heap memory to the system; True when some was returned (False too
    where the C library is not glibc)."""
    if _malloc_trim is None:
        return False
    started = time.perf_counter()
    released = bool(_malloc_trim(0))
    logger.debug("malloc_trim took %.1f ms", (time.perf_counter() - started) * 1000)
    return released


async def trim_memory_when_idle(
    live: Mapping[str, Any],
    *,
    check_every: float = IDLE_CHECK_SECONDS,
    trim: Callable[[], bool] = trim_free_memory,
) -> None:
    """Forever: once `live` (the registry's running executions) becomes empty after holding
    some, `trim` once, off the loop."""
    busy = False
    while True:
        await asyncio.sleep(check_every)
        if live:
            busy = True
        elif busy:
            busy = False
            await anyio.to_thread.run_sync(trim)
