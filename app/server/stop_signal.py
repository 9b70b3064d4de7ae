"""The stop request, carried from a signal handler to the event loop.

uvicorn waits for open requests before it runs the app's shutdown; a long-poll, an approval
wait or a foreground command would hold it there. The server calls `StopSignal.fire()` as
soon as SIGTERM/SIGINT arrives, so that the app answers those waits and stops its commands
while uvicorn is still draining connections.

Before that, the app announces the stop (a replica marks its row in the shared database as
stopping, app/cluster/node.py): the server awaits the announcement (`until_announced`) before
it closes its listeners, so that the other replicas know before this one stops answering, and
every wait the stop cuts short is cut after they can know. A database that does not answer
holds the stop for ANNOUNCE_SECONDS at most.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

logger = logging.getLogger("shellgate.serving")

ANNOUNCE_SECONDS = 1.0


class StopSignal:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._callback: Callable[[], None] | None = None
        self._announce: Callable[[], Awaitable[None]] | None = None
        self._fired = False
        self._announced = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()

    def bind(
        self,
        loop: asyncio.AbstractEventLoop,
        callback: Callable[[], None],
        *,
        announce: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """When the stop is requested (at once if it already was): await `announce()` (bounded),
        then run `callback` on `loop`."""
        self._loop, self._callback, self._announce = loop, callback, announce
        if self._fired:
            loop.call_soon_threadsafe(self._begin)

    def fire(self) -> None:
        """Request the stop; safe from a signal handler or another thread. Idempotent."""
        if self._fired:
            return
        self._fired = True
        if self._loop is not None and self._callback is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._begin)

    async def until_announced(self) -> None:
        """Returns once a requested stop was announced (at once when none was requested or no
        app is bound)."""
        if self._fired and self._callback is not None:
            await self._announced.wait()

    def _begin(self) -> None:
        task = asyncio.get_running_loop().create_task(self._announce_then_stop())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _announce_then_stop(self) -> None:
        assert self._callback is not None
        try:
            if self._announce is not None:
                announcing = asyncio.ensure_future(self._announce())
                # Not cancelled past the bound: a database call on a worker thread cannot be.
                done, _ = await asyncio.wait({announcing}, timeout=ANNOUNCE_SECONDS)
                if not done:
                    logger.warning(
                        "announcing the stop took over %g s: stopping without it", ANNOUNCE_SECONDS
                    )
                elif announcing.exception() is not None:
                    logger.warning("announcing the stop failed: %s", announcing.exception())
        finally:
            self._announced.set()
            self._callback()
