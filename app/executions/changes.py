"""State changes of execution records: whoever changes one calls `notify`; whoever waits for
one (a long-poll, a caller waiting on an approval, a stream) uses the one loop in `wait_until`.

Every wait here also ends when the server starts stopping (`stop`): the waiting caller is then
answered at once with the state as it is, rather than hold the shutdown up."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from app.models import Execution


class StateChanges:
    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}
        self._stopping = asyncio.Event()

    def notify(self, execution_id: str) -> None:
        event = self._events.pop(execution_id, None)
        if event is not None:
            event.set()

    # --- the server stopping ------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def stop(self) -> None:
        """End every wait, now and from now on."""
        self._stopping.set()

    async def until_stopping(self) -> None:
        await self._stopping.wait()

    async def wait_unless_stopping(self, awaitable: Awaitable[Any], within: float | None) -> bool:
        """Await `awaitable` for up to `within` seconds (None: no limit); False when the time
        ran out or the server started stopping first (the awaitable is then cancelled)."""
        done = asyncio.ensure_future(awaitable)
        stop = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({done, stop}, timeout=within, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not done.done():
                done.cancel()
        return done.done() and not done.cancelled() and done.exception() is None

    # --- the one wait loop --------------------------------------------------------------------

    async def wait_until(
        self,
        execution_id: str,
        read: Callable[[], Awaitable[Execution]],
        done: Callable[[Execution], bool],
        within: float,
    ) -> Execution:
        """The record once `done(record)` holds, or as it is after `within` seconds or once the
        server starts stopping."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while True:
            # Registered before the read, so a change between the read and the wait wakes us.
            event = self._events.setdefault(execution_id, asyncio.Event())
            record = await read()
            remaining = deadline - loop.time()
            if done(record) or remaining <= 0 or self.stopping:
                return record
            await self.wait_unless_stopping(event.wait(), remaining)
