"""Long commands are read for the policy (`app.shell_syntax.read_command`) in a process of
their own, bounded in time and memory.

tree-sitter-bash parses in C and holds the interpreter lock from the first byte to the last, so
a parse on a worker thread stops the event loop as surely as one on the loop. On some text its
error recovery is superlinear in time and in memory: 16 KiB of `a|a|…|` took 1.5 s and 650 MiB,
8 KiB 0.4 s, 64 KiB over a minute and more memory than a host has (RELIABILITY.md, "One request
against all the others"). A command longer than the policy's inline limit is therefore read by
a child, `python -m app.policy_reader`, one JSON line in and one out. A child that has not
answered within `READ_DEADLINE_SECONDS`, or that dies (past `READ_MEMORY_BYTES` of address
space tree-sitter aborts), is killed and replaced; the command then reads as having reached a
limit of the reader, which no policy allows (docs/policy.md#bounded-evaluation).
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import sys

from app.blocking import run_blocking
from app.process.line_child import LineChild
from app.shell_syntax import CommandReading, read_command, rough_segments

logger = logging.getLogger("shellgate.policy")

# A real 64 KiB script reads in under 2 s here (`eval eval …`, the slowest shape found); the
# hostile shapes grow without bound.
READ_DEADLINE_SECONDS = 10.0
READ_MEMORY_BYTES = 1 << 30
# Children at once: each reads one command at a time, a later caller waits for a free one.
READERS = 2
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
    return LineChild("app.policy_reader")


class CommandReaders:
    """The children, started when a long command first comes and reused after. The process
    is spawned, written to and read on a worker thread: spawning waits for the child's exec,
    and the answer, a reading of a 64 KiB command, is JSON to decode."""

    def __init__(self, *, deadline: float = READ_DEADLINE_SECONDS, size: int = READERS) -> None:
        self._deadline = deadline
        self._slots = asyncio.Semaphore(size)
        self._idle: list[LineChild] = []
        # Every child alive, idle or reading: the server's stop kills them all, so that none
        # outlives it (a stopped or busy child never reads the EOF its server's exit leaves).
        self._children: set[LineChild] = set()
        self._closes = 0  # how many times `close` ran: a child started across one is killed

    async def read(self, command: str) -> CommandReading:
        async with self._slots:
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

            timer = asyncio.get_running_loop().call_later(self._deadline, expire)
            reading: CommandReading | None = None
            try:
                reading = await run_blocking(lambda: _ask(child, command))
            except Exception as error:  # a death (EOF), a garbled answer, a nesting too deep
                stopped = f" (deadline {self._deadline:g} s)" if expired else ""
                logger.warning(
                    "reading a command of %d characters was stopped: %s%s",
                    len(command),
                    error,
                    stopped,
                )
            finally:
                timer.cancel()
                if reading is None or expired or child not in self._children:
                    # (killed just as it answered, or by the stop meanwhile: not reused)
                    self._children.discard(child)
                    await run_blocking(child.close)
                else:
                    self._idle.append(child)
        if reading is None:
            return await run_blocking(lambda: over_limit(command))  # ~0.1 s at 64 KiB
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
