"""uvicorn with a bounded graceful stop (`SHELLGATE_SHUTDOWN_GRACE`).

On the first SIGTERM/SIGINT the app is told at once: it announces the stop (a replica marks its
row stopping), refuses new work with 503, lets foreground commands that end within the drain
answer as usual, then answers the other waiting calls and stops running commands. Once the
announcement is made (app/server/stop_signal.py) uvicorn closes its listeners, closes WebSockets
with 1012 and waits for open requests up to half the grace before cancelling them; the app's own
shutdown gets the rest. A watchdog ends the process when the grace is over whatever is still
open (a hung database call, a thread that does not return).
"""

from __future__ import annotations

import gc
import logging
import os
import socket
import threading
from collections.abc import Awaitable, Callable
from types import FrameType

import uvicorn

from app.server.start_gc import resume_full_collections

logger = logging.getLogger("shellgate.serving")

EXIT_GRACE_EXCEEDED = 70  # EX_SOFTWARE: the graceful stop did not finish in time


class GracefulServer(uvicorn.Server):
    def __init__(
        self,
        config: uvicorn.Config,
        *,
        on_stop: Callable[[], None],
        grace: float,
        before_closing: Callable[[], Awaitable[None]] | None = None,
    ):
        super().__init__(config)
        self._on_stop = on_stop
        self._before_closing = before_closing
        self._grace = grace
        self._watchdog: threading.Timer | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        # Everything loaded by now (the framework, SQLAlchemy, the policy engine, the app:
        # several hundred thousand objects) lives as long as the server. Left in the
        # collector's oldest generation, each full collection walked them all, stalling the
        # event loop 60-120 ms under load (bench/soak.py); frozen, a collection walks only
        # what the work itself made. `shellgate serve` started with no full collection
        # (app/server/start_gc.py): they resume now, over what the work makes.
        gc.freeze()
        resume_full_collections()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self._before_closing is not None:
            # The others are told this replica stops before it stops answering them.
            await self._before_closing()
        await super().shutdown(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        first = not self.should_exit
        super().handle_exit(sig, frame)
        if first:
            self._watchdog = threading.Timer(self._grace, _grace_exceeded, args=(self._grace,))
            self._watchdog.daemon = True
            self._watchdog.start()
            self._on_stop()


def _grace_exceeded(grace: float) -> None:
    logger.error("shutdown took longer than the %.1f s grace: exiting now", grace)
    logging.shutdown()
    os._exit(EXIT_GRACE_EXCEEDED)


def graceful_shutdown_timeout(grace: float) -> int:
    """How long uvicorn waits for open requests before cancelling them (whole seconds)."""
    return max(1, int(grace / 2))
