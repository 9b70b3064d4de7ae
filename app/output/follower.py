"""Following one execution's log from an offset to its end (docs/streaming.md): read what the
log holds after the cursor, wait for more bytes or the exit, jump over what a truncated log
evicted (a gap), and stop once nothing more can be appended and every byte was handed over.

The service follows logs for two kinds of clients, each encoding the bytes its own way: the
execution stream's frames (`app/executions/viewer.py`) and the runner's NDJSON items
(`app/sessions/runner.py`). The follower does the rest for both: which reads, on which thread,
when to wait, where a gap is and when it is over.
"""

from __future__ import annotations

import asyncio
import functools
from collections import OrderedDict
from collections.abc import AsyncGenerator, Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any, Final, Generic, Protocol, TypeAlias, TypeVar

from app.core.blocking import run_blocking
from app.output.artifact_log import ArtifactLog
from app.output.live_edge import RecentOutput
from app.process import OutputStream

# A live wait is re-armed after this long (every wait bounded); new bytes end it at once.
LIVE_WAIT_SLICE_SECONDS: Final = 30.0
# Following a burst of output live: how long a follower at its edge waits for a full read to
# gather before reading what there is (small writes are handed over at once).
BURST_COALESCE_SECONDS: Final = 0.005
# The latest reads of a live log kept for its other followers (`SharedReads`): followers that
# keep up wake together at the same cursor, so they need only the newest few.
SHARED_READS_KEPT: Final = 4

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
    shared_reads: SharedReads

    @property
    def has_exited(self) -> bool: ...

    @property
    def total_bytes(self) -> int: ...

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


class _Abandoned(Exception):
    """The follower doing a shared read went away (or failed) before it was done: whoever
    waited for it reads for itself."""


class SharedReads:
    """The reads of one live log, shared by its followers (docs/streaming.md, "Several viewers
    and slow viewers"): the first follower to ask for a read from a cursor does it and its
    encoding; every other follower asking for the same read meanwhile, or soon after, takes
    that result instead of reading and encoding the same bytes again. N viewers of one
    command cost one read and one encoding per batch, not N. Loop only.

    A read is keyed by what decides its result: the cursor, the read's limit, whether the log
    was final, the encoder (and, for bytes taken from memory, where they ended). The log only
    grows, so an earlier read from the same cursor is still exact, however short: the
    follower reads the rest next time. Nothing is kept while nobody follows."""

    def __init__(self, kept: int = SHARED_READS_KEPT) -> None:
        self._kept = kept
        self._reads: OrderedDict[Hashable, asyncio.Future[Any]] = OrderedDict()
        self._followers = 0

    def follow(self) -> None:
        self._followers += 1

    def unfollow(self) -> None:
        self._followers = max(0, self._followers - 1)
        if not self._followers:
            self._reads.clear()

    def done(self, key: Hashable) -> Any | None:
        """The result of a finished read of `key`, if one is kept."""
        future = self._reads.get(key)
        if future is None or not future.done() or future.exception() is not None:
            return None
        return future.result()

    def keep(self, key: Hashable, result: Any) -> None:
        """A read done on the loop, for the followers that ask for it next."""
        if self._followers > 1:  # a lone follower never asks twice
            future = asyncio.get_running_loop().create_future()
            future.set_result(result)
            self._store(key, future)

    async def read(
        self,
        key: Hashable,
        make: Callable[[], Awaitable[T]],
        still_useful: Callable[[T], bool] = lambda _: True,
    ) -> T:
        """`make()`'s result, or the result of the same read another follower (or this one)
        made, unless `still_useful` rejects it: a kept read that ends where the caller already
        read to would hand it nothing new, and awaiting a finished future does not yield to the
        loop, so the caller would take it again and again without the loop ever running the
        reader that appends what it waits for. Such a read is dropped and made afresh."""
        while True:
            future = self._reads.get(key)
            if future is None:
                break
            try:
                # Shielded: a waiter that leaves must not cancel the read for the others.
                result: T = await asyncio.shield(future)
            except _Abandoned:
                continue  # its reader left: read (or wait for whoever does) again
            if still_useful(result):
                return result
            if self._reads.get(key) is future:
                del self._reads[key]
        future = asyncio.get_running_loop().create_future()
        self._store(key, future)
        try:
            result = await make()
        except BaseException:
            if self._reads.get(key) is future:
                del self._reads[key]
            future.set_exception(_Abandoned())
            future.exception()  # retrieved: nobody may be waiting
            raise
        future.set_result(result)
        return result

    def _store(self, key: Hashable, future: asyncio.Future[Any]) -> None:
        self._reads[key] = future
        self._reads.move_to_end(key)
        while len(self._reads) > self._kept:
            self._reads.popitem(last=False)


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


def _has_more_than(seen_up_to: int, read: _Read[Any]) -> bool:
    """Whether `read` ends past `seen_up_to` (the end of the follower's last read), or is the
    last read of the log: else it holds nothing the follower waited for."""
    return read.complete or read.end > seen_up_to


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
    if pieces is None:
        return None
    size = sum(len(data) for _, _, data in pieces)
    # The bytes from `cursor` to `cursor + size`, encoded: the same for every follower.
    key = ("memory", cursor, size, encode)
    shared: _Read[T] | None = live.shared_reads.done(key)
    if shared is not None:
        return shared
    if not encodes_on_loop(pieces):
        return None
    encoded, encoded_end = encode(pieces, True)
    read = _Read(cursor, encoded, encoded_end, cursor + size, False)
    live.shared_reads.keep(key, read)
    return read


async def follow_log(
    log: ArtifactLog,
    offset: int,
    live: FollowedExecution | None,
    encode: Encoder[T],
    *,
    read_bytes: int,
    encodes_on_loop: Callable[[list[Piece]], bool] | None = None,
    burst_bytes: int | None = None,
    wait_slice: float = LIVE_WAIT_SLICE_SECONDS,
) -> AsyncGenerator[T | Gap, None]:
    """What `encode` makes of each read of the log from `offset` to its end, and a `Gap` where
    the cursor pointed into an evicted middle; with `live`, waits for the bytes still to come
    until the process has exited and every byte was handed over.

    `encodes_on_loop`: given, a follower at the live edge takes the bytes from memory and, when
    this says they are cheap to encode, encodes them on the loop (no thread hop); otherwise
    every read is a worker-thread hop. `burst_bytes`: given, a read of at least that many bytes
    of a live log waits up to `BURST_COALESCE_SECONDS` for a full read to gather. `wait_slice`:
    how long a wait for new bytes lasts before the follower reads (and finds nothing new)."""
    from_memory = live is not None and encodes_on_loop is not None
    if from_memory:
        assert live is not None
        # While someone follows, the latest output stays in memory for the live edge.
        live.recent.follow(live.total_bytes)
    if live is not None:
        live.shared_reads.follow()
    try:
        cursor = offset  # the next byte to hand over
        read_end = offset  # the end of the last read: past it, only new bytes
        while True:
            if live is not None and not live.has_exited:
                # At once when the log holds more than what was read (or the process exited).
                await live.wait_for_bytes_after(read_end, within=wait_slice)
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
                if live is None:
                    read = await run_blocking(
                        functools.partial(_read_log, log, cursor, read_bytes, final, encode)
                    )
                else:
                    # Followers at the same cursor share one read and its encoding; one
                    # that ends where this follower's last read did is older than the bytes
                    # it just waited for (it held back a cut character there, and a read
                    # from the same cursor was kept before the rest came): read again.
                    shared: _Read[T] = await live.shared_reads.read(
                        ("log", cursor, read_bytes, final, encode),
                        functools.partial(
                            run_blocking,
                            functools.partial(_read_log, log, cursor, read_bytes, final, encode),
                        ),
                        functools.partial(_has_more_than, read_end),
                    )
                    read = shared
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
        if live is not None:
            live.shared_reads.unfollow()
