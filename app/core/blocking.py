"""Hops to worker threads that live as long as the server: the execution path (the spawn and
the terminal record), the database, and the reads of logs.

What `anyio.to_thread.run_sync` does for these, for less: it looked up its backend, its
default capacity limiter and its cancel scope on every call, a tenth of a foreground call's
CPU on the loop (bench/PROFILE.md). And its threads end once idle for 10 s (pruned by a later
call), so a server whose load comes and goes started threads again and again, each start
waiting on the event loop for the new thread to run (99 in a 90 s soak, up to 13 ms each on
a loaded machine: bench/PROFILE.md, "The soak's tail"). Here a pool grows to its peak once
and keeps its threads.

The work runs in the caller's context (the request id its log lines carry), and it always
runs to its end: a caller cancelled meanwhile gets the cancel only once the work has
finished, as anyio's does, because work cut loose half way would leave a spawned process
with nobody supervising it, or a record nobody waits for.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

from app.core.errors import ProcessesExhaustedError, processes_exhausted_reason

T = TypeVar("T")


class WorkerThreads:
    """A pool of at most `workers` threads named `name-N`, made as they are first needed."""

    def __init__(self, name: str, workers: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)

    async def run(self, work: Callable[[], T]) -> T:
        """`work()` on one of the threads; its result or its exception. A thread the kernel
        would not start (the processes limit of the server's cgroup, its memory) is a
        `ProcessesExhaustedError`, and the work never runs."""
        context = contextvars.copy_context()
        guarded = _Abandonable(context, work)
        try:
            future = asyncio.get_running_loop().run_in_executor(self._pool, guarded.run)
        except RuntimeError as error:
            reason = processes_exhausted_reason(error)
            if reason is None:
                raise
            # The pool queued the work before it failed to start a thread for it: a thread
            # free later would still run it, after the caller was told nothing was done.
            guarded.abandoned = True
            raise ProcessesExhaustedError(reason) from error
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


class _Abandonable(Generic[T]):
    """Work that does nothing once abandoned."""

    def __init__(self, context: contextvars.Context, work: Callable[[], T]) -> None:
        self.context = context
        self.work = work
        self.abandoned = False

    def run(self) -> T:
        if self.abandoned:
            raise RuntimeError("abandoned: its caller was told it did not run")
        return self.context.run(self.work)


# As many as anyio's default limiter allows: the work is short, but a busy disk or a
# database that waits can hold a thread. Their long life is load-bearing: commands are
# spawned here, and bwrap's `--die-with-parent` (PR_SET_PDEATHSIG) kills the sandbox when the
# *thread* that forked it ends (docs/operations.md, "When a replica dies").
EXECUTION_PATH = WorkerThreads("shellgate-blocking", 40)


async def run_blocking(work: Callable[[], T]) -> T:
    """`work()` on a thread of the execution path; its result or its exception."""
    return await EXECUTION_PATH.run(work)
