"""Long commands are read for the policy (`app.policy.shell.syntax.read_command`) in a process of
their own, bounded in time and memory.

tree-sitter-bash parses in C and holds the interpreter lock from the first byte to the last, so
a parse on a worker thread stops the event loop as surely as one on the loop. On some text its
error recovery is superlinear in time and in memory: 16 KiB of `a|a|…|` took 1.5 s and 650 MiB,
8 KiB 0.4 s, 64 KiB over a minute and more memory than a host has (RELIABILITY.md, "One request
against all the others"). A command longer than the policy's inline limit is therefore read by
a child, `python -m app.policy.reader_process`, one JSON line in and one out. A child that has not
answered within `READ_DEADLINE_SECONDS`, or that dies (past `READ_MEMORY_BYTES` of address
space tree-sitter aborts), is killed and replaced; the command then reads as having reached a
limit of the reader, which no policy allows (docs/policy.md#bounded-evaluation).

There are `READERS` children, shared between callers. A call (a submission, a session call, a
dry run) waits for a free one at most the deadline plus `WAIT_MARGIN_SECONDS` (12 s) from its
arrival, and its texts together read for at most the deadline, so no call takes longer than
the two (22 s). A free reader goes to the owner with the fewest reads under way, taking turns
among equals: one agent flooding the readers with hostile commands queues behind its own, and
another's long command takes the next free reader. A command that found none within the wait
is refused (503 `readers_busy`, `Retry-After`): not read, so not allowed, and nothing recorded.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import sys
from collections import Counter, deque
from dataclasses import dataclass

from app.core.blocking import run_blocking
from app.core.errors import ReadersBusyError
from app.policy.shell.syntax import CommandReading, read_command, rough_segments
from app.process.line_child import LineChild

logger = logging.getLogger("shellgate.policy")

# A real 64 KiB script reads in under 2 s here (`eval eval …`, the slowest shape found); the
# hostile shapes grow without bound.
READ_DEADLINE_SECONDS = 10.0
READ_MEMORY_BYTES = 1 << 30
# Children at once: each reads one command at a time, a later caller waits for a free one.
READERS = 2
# How long past the reading deadline a call may wait for a free reader, from its arrival.
# Every read ends within its deadline (and the moment it takes to kill and reap its child): the
# owner first in line gets the next free reader within the deadline and this.
WAIT_MARGIN_SECONDS = 2.0
OVER_LIMIT = "the command took too long or too much memory to read"


def over_limit(command: str) -> CommandReading:
    """What a command reads as when its reading was stopped: a reached limit, with the rough
    split of the text so that deny rules still see its parts."""
    why = f"{OVER_LIMIT} (a limit of the reader)"
    return CommandReading(tuple(rough_segments(command)), (why,), None, OVER_LIMIT)


def _encode(reading: CommandReading) -> str:
    return json.dumps(
        [reading.segments, reading.unreadable, reading.parse_error, reading.limit_reached]
    )


def _ask(child: LineChild, command: str) -> CommandReading:
    """The child's reading of `command`; ValueError when its answer is not one (a garbled
    line, a wrong shape): a reading the rules would choke on is never taken."""
    answer = json.loads(child.ask(json.dumps(command).encode("ascii")))
    if not (isinstance(answer, list) and len(answer) == 4):
        raise ValueError(f"the reader answered {_shown(answer)}, not a reading")
    segments, unreadable, parse_error, limit_reached = answer
    if not (
        _strings(segments)
        and _strings(unreadable)
        and isinstance(parse_error, str | None)
        and isinstance(limit_reached, str | None)
    ):
        raise ValueError(f"the reader answered {_shown(answer)}, not a reading")
    return CommandReading(tuple(segments), tuple(unreadable), parse_error, limit_reached)


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _shown(answer: object) -> str:
    text = repr(answer)
    return text if len(text) <= 80 else text[:80] + "…"


def _start() -> LineChild:
    return LineChild("app.policy.reader_process")


@dataclass
class ReadingBudget:
    """One call's share of the readers (a submission, a session call, a dry run): whose it is
    (free readers are shared fairly between owners), until when (the event loop's clock) it may
    wait for one, and how many seconds of reading its texts have left together."""

    owner: str
    wait_until: float
    reading_left: float


class FairSlots:
    """`size` slots shared between owners: a freed slot goes to the waiting owner holding the
    fewest, and among equals to the one served longest ago (one never served first, in the
    order they came); an owner's own waits in their order."""

    def __init__(self, size: int) -> None:
        self._free = size
        self._held: Counter[str] = Counter()
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}  # oldest wait first
        self._served: dict[str, int] = {}  # when each owner last got a slot (a count)
        self._grants = 0

    async def acquire(self, owner: str, until: float) -> bool:
        """A slot for `owner` by `until` on the event loop's clock (True), or none (False)."""
        if self._free and not self._waiting:
            self._take(owner)
            return True
        loop = asyncio.get_running_loop()
        granted = loop.create_future()
        self._waiting.setdefault(owner, deque()).append(granted)
        try:
            await asyncio.wait([granted], timeout=max(until - loop.time(), 0))
        except BaseException:  # cancelled: a slot given meanwhile goes to the next in line
            if granted.done():
                self.release(owner)
            else:
                self._withdraw(owner, granted)
            raise
        if granted.done():
            return True
        self._withdraw(owner, granted)
        return False

    def release(self, owner: str) -> None:
        self._held[owner] -= 1
        self._free += 1
        self._grant()
        self._forget(owner)

    def _take(self, owner: str) -> None:
        self._free -= 1
        self._held[owner] += 1
        self._grants += 1
        self._served[owner] = self._grants

    def _grant(self) -> None:
        while self._free and self._waiting:
            owner = min(
                self._waiting, key=lambda name: (self._held[name], self._served.get(name, 0))
            )
            waits = self._waiting[owner]
            granted = waits.popleft()
            if not waits:
                del self._waiting[owner]
            self._take(owner)
            granted.set_result(None)

    def _withdraw(self, owner: str, granted: asyncio.Future[None]) -> None:
        waits = self._waiting.get(owner)
        if waits is not None and granted in waits:
            waits.remove(granted)
            if not waits:
                del self._waiting[owner]
        granted.cancel()
        self._forget(owner)

    def _forget(self, owner: str) -> None:
        """An owner that holds nothing and waits for nothing is forgotten (its name too)."""
        if not self._held[owner] and owner not in self._waiting:
            self._held.pop(owner, None)
            self._served.pop(owner, None)


class CommandReaders:
    """The children, started when a long command first comes and reused after. The process
    is spawned, written to and read on a worker thread: spawning waits for the child's exec,
    and the answer, a reading of a 64 KiB command, is JSON to decode."""

    def __init__(
        self,
        *,
        deadline: float = READ_DEADLINE_SECONDS,
        size: int = READERS,
        wait: float | None = None,
    ) -> None:
        self._deadline = deadline
        self._wait = deadline + WAIT_MARGIN_SECONDS if wait is None else wait
        self._slots = FairSlots(size)
        self._idle: list[LineChild] = []
        # Every child alive, idle or reading: the server's stop kills them all, so that none
        # outlives it (a stopped or busy child never reads the EOF its server's exit leaves).
        self._children: set[LineChild] = set()
        self._closes = 0  # how many times `close` ran: a child started across one is killed

    def budget(self, owner: str) -> ReadingBudget:
        """A new call's share, from now: the wait and the deadline, whole."""
        now = asyncio.get_running_loop().time()
        return ReadingBudget(owner, now + self._wait, self._deadline)

    async def read(self, command: str, budget: ReadingBudget | None = None) -> CommandReading:
        """The reading of `command`, within `budget` (a call of its own when None):
        ReadersBusyError when no reader was free within its wait; a reached limit when its
        reading time ran out."""
        budget = budget if budget is not None else self.budget("")
        if not await self._slots.acquire(budget.owner, budget.wait_until):
            logger.warning(
                "a command of %d characters by %s found no free reader within %g s: refused",
                len(command),
                budget.owner or "-",
                self._wait,
            )
            raise ReadersBusyError(retry_after_seconds=max(1, round(self._deadline / 2)))
        try:
            reading = await self._read(command, budget)
        finally:
            self._slots.release(budget.owner)
        if reading is None:
            return await run_blocking(lambda: over_limit(command))  # ~0.1 s at 64 KiB
        return reading

    async def _read(self, command: str, budget: ReadingBudget) -> CommandReading | None:
        """A child's reading of `command` in the reading time `budget` has left (taken off
        it), or None when it was stopped."""
        if budget.reading_left <= 0:
            logger.warning(
                "reading a command of %d characters was not started: its call's %g s of "
                "reading are spent",
                len(command),
                self._deadline,
            )
            return None
        closes = self._closes
        child = self._idle.pop() if self._idle else await run_blocking(_start)
        self._children.add(child)
        if self._closes != closes:  # the stop came while it was starting
            child.kill()
        # Past the deadline the child is killed, which ends the read with EOF.
        expired: list[bool] = []

        def expire() -> None:
            expired.append(True)
            child.kill()

        loop = asyncio.get_running_loop()
        started = loop.time()
        timer = loop.call_later(budget.reading_left, expire)
        reading: CommandReading | None = None
        try:
            reading = await run_blocking(lambda: _ask(child, command))
        except Exception as error:  # a death (EOF), a garbled answer, a nesting too deep
            stopped = f" (deadline {budget.reading_left:g} s)" if expired else ""
            logger.warning(
                "reading a command of %d characters was stopped: %s%s",
                len(command),
                error,
                stopped,
            )
        finally:
            timer.cancel()
            budget.reading_left -= loop.time() - started
            if reading is None or expired or child not in self._children:
                # (killed just as it answered, or by the stop meanwhile: not reused)
                self._children.discard(child)
                await run_blocking(child.close)
            else:
                self._idle.append(child)
        return reading

    def stop(self) -> None:
        """The server is stopping: kill every child now, so that a read under way ends at
        once as a limit (never allowed) and its request is answered before uvicorn cuts the
        requests still open. Reaped by their reads, or by `close`."""
        self._closes += 1
        for child in self._children:
            child.kill()

    async def close(self) -> None:
        """Kill and reap every child, reading or idle (the server stops): a read under way
        ends as a reached limit, never allowed. A read that starts later starts a new child."""
        self._closes += 1
        children, self._children, self._idle = self._children, set(), []
        for child in children:
            child.kill()  # at once: a read waiting on it ends now, not at its deadline
        for child in children:
            await run_blocking(child.close)


def memory_cap() -> int:
    """`READ_MEMORY_BYTES`, or the hard limit the server was given when it is lower: raising
    it is refused, and a reader that died of that at its start left every long command
    refused as too costly to read."""
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    return READ_MEMORY_BYTES if hard == resource.RLIM_INFINITY else min(READ_MEMORY_BYTES, hard)


def main() -> None:
    """The child: one JSON string (a command) per line in, its reading per line out."""
    resource.setrlimit(resource.RLIMIT_AS, (cap := memory_cap(), cap))
    for line in sys.stdin.buffer:
        sys.stdout.write(_encode(read_command(json.loads(line))) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
