"""State changes of execution records: whoever changes one calls `notify`; whoever waits for
one (a long-poll, a caller waiting on an approval, a stream) uses the one loop in `wait_until`.

Every wait here also ends when the server starts stopping (`stop`): the waiting caller is then
answered at once with the state as it was when the stop began, rather than hold the shutdown
up. A waiter whose record had not changed by then answers with the record it holds: read again,
it would race the stop's own writes (every running command being recorded `lost`).

Before that, the stop drains (`drain`): new work is refused, and a foreground call whose command
ends within the drain answers as it would have (docs/operations.md#graceful-shutdown)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from app.store.models import Execution


class _Waiters:
    """The waits registered on one execution id: the event that `notify` sets, and how many
    waits hold it (the entry goes with the last of them)."""

    __slots__ = ("count", "event")

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.count = 0


class StateChanges:
    def __init__(self) -> None:
        # Only the ids some wait is registered on now: a wait that leaves without a `notify`
        # (timed out, cancelled, or following another replica's record, whose changes are
        # never notified here) takes its entry with it when it is the last one.
        self._events: dict[str, _Waiters] = {}
        self._stopping = asyncio.Event()
        # The waits still unchanged when the stop began (their record in hand is current).
        self._unchanged_at_stop: set[asyncio.Event] = set()
        # Calls inside `wait_until` now (long-polls, event feeds, streamed approvals): the
        # `shellgate_waiting_calls` gauge, which tells an operator (and a test) who is held.
        self.waiting = 0
        # Foreground calls waiting for their command's end (`awaiting_command_end`), which the
        # stop's drain lets end by themselves; and whether the drain began (new work refused).
        self._command_waits = 0
        self._no_command_waits = asyncio.Event()
        self._no_command_waits.set()
        self._draining = False

    def notify(self, execution_id: str) -> None:
        waiters = self._events.pop(execution_id, None)
        if waiters is not None:
            waiters.event.set()

    @contextlib.contextmanager
    def _registered(self, execution_id: str) -> Iterator[asyncio.Event]:
        """The event the next `notify` of this id sets, held until the block is left."""
        waiters = self._events.get(execution_id)
        if waiters is None:
            waiters = self._events[execution_id] = _Waiters()
        waiters.count += 1
        try:
            yield waiters.event
        finally:
            waiters.count -= 1
            # A notified entry was already taken out (and a newer one may stand in its place).
            if waiters.count == 0 and self._events.get(execution_id) is waiters:
                del self._events[execution_id]

    # --- the server stopping ------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        """Every wait ends now: the drain, if any, is over."""
        return self._stopping.is_set()

    @property
    def refusing(self) -> bool:
        """The stop was requested: new work is refused (from the drain on)."""
        return self._draining or self._stopping.is_set()

    @contextlib.contextmanager
    def awaiting_command_end(self) -> Iterator[None]:
        """Marks a foreground call waiting for its command's end, for the drain."""
        release = self.command_wait()
        try:
            yield
        finally:
            release()

    def command_wait(self) -> Callable[[], None]:
        """Counts a foreground call on its way to its command's end, for the drain, until the
        returned function is called (once; later calls do nothing). A count handed from one
        task to another is let go only after the other counts itself: an `asyncio.Event` set
        even for a moment wakes the drain, which then ends however soon it is cleared."""
        self._command_waits += 1
        self._no_command_waits.clear()
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            self._command_waits -= 1
            if self._command_waits == 0:
                self._no_command_waits.set()

        return release

    def refuse_new_work(self) -> None:
        """The stop's first step, at once: new work is refused from now on (`refusing`)."""
        self._draining = True

    async def drain(self, within: float) -> None:
        """Returns once no foreground call waits for its command's end (each answered as it
        would have been), or after `within` seconds."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._no_command_waits.wait(), within)

    def stop(self) -> None:
        """End every wait, now and from now on."""
        if not self._stopping.is_set():
            self._unchanged_at_stop = {waiters.event for waiters in self._events.values()}
        self._stopping.set()

    async def until_stopping(self) -> None:
        await self._stopping.wait()

    async def wait_unless_stopping(
        self,
        awaitable: Awaitable[Any],
        within: float | None,
        *,
        unless: Awaitable[Any] | None = None,
    ) -> bool:
        """Await `awaitable` for up to `within` seconds (None: no limit); False when the time
        ran out, the server started stopping or `unless` (the caller leaving) ended first (the
        awaitable is then cancelled; so is `unless`, whenever the wait ends)."""
        done = asyncio.ensure_future(awaitable)
        others = {asyncio.ensure_future(self._stopping.wait())}
        if unless is not None:
            others.add(asyncio.ensure_future(unless))
        try:
            await asyncio.wait({done, *others}, timeout=within, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for other in others:
                other.cancel()
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
        *,
        poll: float | None = None,
    ) -> Execution:
        """The record once `done(record)` holds, or as it is after `within` seconds or once the
        server starts stopping. `poll`: read it again at least this often, for a record that
        another replica changes (only this one's changes are notified here)."""
        self.waiting += 1
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + within
            while True:
                # Registered before the read, so a change between the read and the wait wakes us.
                with self._registered(execution_id) as event:
                    record = await read()
                    remaining = deadline - loop.time()
                    if done(record) or remaining <= 0 or self.stopping:
                        return record
                    await self.wait_unless_stopping(
                        event.wait(), remaining if poll is None else min(remaining, poll)
                    )
                    if self.stopping and event in self._unchanged_at_stop:
                        return record
        finally:
            self.waiting -= 1
