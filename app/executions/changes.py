"""State changes of execution records: whoever changes one calls `notify`; whoever waits for
one (a long-poll, a caller waiting on an approval, a stream) uses the one loop in `wait_until`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from app.models import Execution


class StateChanges:
    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}

    def notify(self, execution_id: str) -> None:
        event = self._events.pop(execution_id, None)
        if event is not None:
            event.set()

    async def wait_until(
        self,
        execution_id: str,
        read: Callable[[], Awaitable[Execution]],
        done: Callable[[Execution], bool],
        within: float,
    ) -> Execution:
        """The record once `done(record)` holds, or as it is after `within` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while True:
            # Registered before the read, so a change between the read and the wait wakes us.
            event = self._events.setdefault(execution_id, asyncio.Event())
            record = await read()
            remaining = deadline - loop.time()
            if done(record) or remaining <= 0:
                return record
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), remaining)
