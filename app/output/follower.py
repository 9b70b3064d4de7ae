"""Following one execution's log from an offset to its end (docs/streaming.md): read what the
log holds after the cursor, wait for more bytes or the exit, jump over what a truncated log
evicted (a gap), and stop once nothing more can be appended and every byte was handed over.

The service follows logs for two kinds of clients, each encoding the bytes its own way: the
execution stream's frames (`app/executions/viewer.py`) and the runner's NDJSON items
(`app/sessions/runner.py`). The follower does the rest for both: which reads, on which thread,
when to wait, where a gap is and when it is over.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Final, Generic, Protocol, TypeAlias, TypeVar

import anyio.to_thread

from app.output.artifact_log import ArtifactLog
from app.output.live_edge import RecentOutput
from app.process import OutputStream

# A live wait is re-armed after this long (every wait bounded); new bytes end it at once.
LIVE_WAIT_SLICE_SECONDS: Final = 30.0
# Following a burst of output live: how long a follower at its edge waits for a full read to
# gather before reading what there is (small writes are handed over at once).
BURST_COALESCE_SECONDS: Final = 0.005

T = TypeVar("T")

# (logical offset, stream, bytes), one per stream run: what `ArtifactLog.read_labelled` gives.
Piece: TypeAlias = tuple[int, OutputStream, bytes]
# A client's encoding of the pieces one read took, and the offset after the last byte it
# carries (None: none), where the next read starts. `more_may_follow` (the log may still grow)
# lets it hold back an incomplete character, which the next read then takes again.
Encoder: TypeAlias = Callable[[list[Piece], bool], tuple[T, int | None]]


class FollowedExecution(Protocol):
    """What following needs of a running execution (`app.executions.registry.LiveExecution`)."""

    recent: RecentOutput

    @property
    def has_exited(self) -> bool: ...

    async def wait_for_bytes_after(self, offset: int, within: float | None = None) -> None: ...


@dataclass(frozen=True)
class Gap:
    """`[start, end)` was evicted from a truncated log before the follower read it."""

    start: int
    end: int


@dataclass(frozen=True)
class _Read(Generic[T]):
    start: int  # where the read began: the cursor, or past the evicted middle it pointed into
    encoded: T
    encoded_end: int | None  # the offset after the last byte `encoded` carries
    end: int  # start + the bytes read
    complete: bool  # nothing can be added after `end` (checked before reading)


def _read_log(
    log: ArtifactLog, cursor: int, limit: int, finished: bool, encode: Encoder[T]
) -> _Read[T]:
    """Runs in a worker thread: the read, and the encoding, whose cost grows with the bytes
    read (decoding, base64, escaping), stay off the event loop."""
    # `complete` first: once it is true the total is final, so a read after it sees every byte.
    complete = finished or log.complete
    start = log.next_available(cursor)
    pieces = log.read_labelled(start, limit)
    end = start + sum(len(data) for _, _, data in pieces)
    encoded, encoded_end = encode(pieces, not complete)
    return _Read(start, encoded, encoded_end, end, complete)


def _read_recent(
    live: FollowedExecution,
    cursor: int,
    limit: int,
    encode: Encoder[T],
    encodes_on_loop: Callable[[list[Piece]], bool],
) -> _Read[T] | None:
    """On the loop, at the live edge: the bytes after `cursor` as the reader handed them to the
    log, from memory (`LiveExecution.recent`), encoded here. None when they are not all in
    memory (the follower is behind) or too costly to encode on the loop: then `_read_log` on a
    worker thread. Never claims the end of the log (`complete`): that is settled through
    `_read_log` once the process has exited."""
    pieces = live.recent.since(cursor, limit)
    if pieces is None or not encodes_on_loop(pieces):
        return None
    encoded, encoded_end = encode(pieces, True)
    size = sum(len(data) for _, _, data in pieces)
    return _Read(cursor, encoded, encoded_end, cursor + size, False)


async def follow_log(
    log: ArtifactLog,
    offset: int,
    live: FollowedExecution | None,
    encode: Encoder[T],
    *,
    read_bytes: int,
    encodes_on_loop: Callable[[list[Piece]], bool] | None = None,
    burst_bytes: int | None = None,
) -> AsyncGenerator[T | Gap, None]:
    """What `encode` makes of each read of the log from `offset` to its end, and a `Gap` where
    the cursor pointed into an evicted middle; with `live`, waits for the bytes still to come
    until the process has exited and every byte was handed over.

    `encodes_on_loop`: given, a follower at the live edge takes the bytes from memory and, when
    this says they are cheap to encode, encodes them on the loop (no thread hop); otherwise
    every read is a worker-thread hop. `burst_bytes`: given, a read of at least that many bytes
    of a live log waits up to `BURST_COALESCE_SECONDS` for a full read to gather."""
    from_memory = live is not None and encodes_on_loop is not None
    if from_memory:
        assert live is not None
        # While someone follows, the latest output stays in memory for the live edge.
        live.recent.follow(log.total_bytes)
    try:
        cursor = offset  # the next byte to hand over
        read_end = offset  # the end of the last read: past it, only new bytes
        while True:
            if live is not None and not live.has_exited:
                # At once when the log holds more than what was read (or the process exited).
                await live.wait_for_bytes_after(read_end, within=LIVE_WAIT_SLICE_SECONDS)
            read = None
            if from_memory and live is not None and not live.has_exited:
                assert encodes_on_loop is not None
                # At the live edge the bytes are still in memory: no file read, and for a
                # small batch (a keystroke's echo) no thread hop either.
                read = _read_recent(live, cursor, read_bytes, encode, encodes_on_loop)
            if read is None:
                # Final once the process exited: `exited` is settled only after the log's
                # finish was attempted, so nothing can be appended past it — even when the
                # finish failed (a full disk) and the log never says it is complete.
                final = live is None or live.has_exited
                read = await anyio.to_thread.run_sync(
                    _read_log, log, cursor, read_bytes, final, encode
                )
            if read.start > cursor:
                yield Gap(cursor, read.start)
                cursor = read.start
            read_end = read.end
            if read.encoded_end is not None and read.encoded_end > cursor:
                yield read.encoded
                cursor = read.encoded_end
                if (
                    burst_bytes is not None
                    and live is not None
                    and not read.complete
                    and read.end - read.start >= burst_bytes
                ):
                    # A burst, and we are at its edge: let a full read gather (or the coalescing
                    # bound pass) rather than pay a read, a thread hop and a send per chunk the
                    # process writes. Keystroke echoes and other small writes never wait here.
                    await live.wait_for_bytes_after(
                        read.start + read_bytes - 1, within=BURST_COALESCE_SECONDS
                    )
            elif read.complete:
                return  # at (or, for an offset past the end, beyond) the last byte
    finally:
        if from_memory:
            assert live is not None
            live.recent.unfollow()
