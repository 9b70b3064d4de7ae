"""The stop request, carried from a signal handler to the event loop.

uvicorn waits for open requests before it runs the app's shutdown; a long-poll, an approval
wait or a foreground command would hold it there. The server calls `StopSignal.fire()` as
soon as SIGTERM/SIGINT arrives, so that the app answers those waits and stops its commands
while uvicorn is still draining connections.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class StopSignal:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._callback: Callable[[], None] | None = None
        self._fired = False

    def bind(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        """Run `callback` on `loop` when the stop is requested (at once if it already was)."""
        self._loop, self._callback = loop, callback
        if self._fired:
            loop.call_soon_threadsafe(callback)

    def fire(self) -> None:
        """Request the stop; safe from a signal handler or another thread. Idempotent."""
        if self._fired:
            return
        self._fired = True
        if self._loop is not None and self._callback is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._callback)
