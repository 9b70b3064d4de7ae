"""The execution path's hop to a worker thread: the spawn and the terminal record.

What `anyio.to_thread.run_sync` does for these, for less: it looked up its backend, its
default capacity limiter and its cancel scope on every call, a tenth of a foreground call's
CPU on the loop (bench/PROFILE.md). The work runs in the caller's context (the request id
its log lines carry), and it always runs to its end: a caller cancelled meanwhile gets the
cancel only once the work has finished, as anyio's does, because work cut loose half way
would leave a spawned process with nobody supervising it, or a record nobody waits for.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

# As many as anyio's default limiter allows: the work is short, but a busy disk or a
# database that waits can hold a thread.
WORKERS = 40

# Its threads live as long as the server, and that is load-bearing: commands are spawned here,
# and bwrap's `--die-with-parent` (PR_SET_PDEATHSIG) kills the sandbox when the *thread* that
# forked it ends. anyio's worker threads end once idle for 10 s (pruned by a later call): a
# command spawned on one would be SIGKILLed then (docs/operations.md, "When a replica dies").

_pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="shellgate-blocking")


async def run_blocking(work: Callable[[], T]) -> T:
    """`work()` on a worker thread; its result or its exception."""
    context = contextvars.copy_context()
    future = asyncio.get_running_loop().run_in_executor(_pool, context.run, work)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        while not future.done():
            try:
                await asyncio.wait((future,))
            except asyncio.CancelledError:
                continue  # cancelled again: the work still has to end first
        if not future.cancelled():
            future.exception()  # seen: its failure is not "never retrieved"
        raise
