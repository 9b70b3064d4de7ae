"""The latest output of a live execution, kept in memory while someone follows it, so a viewer
at the live edge takes the bytes the reader just handed to the log from here, on the event loop,
instead of re-reading them from the file through a worker thread (docs/streaming.md).

Bounded: at most `limit` bytes in at most `MAX_CHUNKS` chunks, and nothing at all while nobody
follows. A viewer whose offset is older than what is kept reads the log as before. The window
never reaches further back than the log itself keeps (its rolling tail past the size cap), so a
viewer sees the same bytes and the same gaps whichever path served it. Loop only: the reader
that feeds it and the viewers that read it all run on the event loop.
"""

from __future__ import annotations

from collections import deque
from typing import Final

from app.process import OutputStream

# How many chunks are kept at most: a stream of one-byte writes (keystroke echoes) must not
# make a read walk thousands of entries. Reads walk from the newest end anyway.
MAX_CHUNKS: Final = 256


class RecentOutput:
    def __init__(self, limit: int) -> None:
        self._limit = max(0, limit)
        # (logical offset, stream, bytes): contiguous, oldest first, ending at the log's total.
        self._chunks: deque[tuple[int, OutputStream, memoryview]] = deque()
        self._size = 0
        self._start = 0  # the first offset kept; the log's total when nothing is
        self._followers = 0

    @property
    def start(self) -> int:
        return self._start

    def follow(self, total: int) -> None:
        """A viewer starts following; `total`: the log's size now (what is kept starts there)."""
        if self._followers == 0:
            self._chunks.clear()
            self._size = 0
            self._start = total
        self._followers += 1

    def unfollow(self) -> None:
        self._followers = max(0, self._followers - 1)
        if self._followers == 0:
            self._chunks.clear()
            self._size = 0

    def remember(self, offset: int, stream: OutputStream, data: bytes) -> None:
        """The bytes just appended to the log at `offset` (only once the append succeeded)."""
        if not self._followers or not data:
            return
        self._chunks.append((offset, stream, memoryview(data)))
        self._size += len(data)
        excess = self._size - self._limit
        while excess > 0 or len(self._chunks) > MAX_CHUNKS:
            first_offset, first_stream, first = self._chunks[0]
            if len(first) <= excess or excess <= 0:
                self._chunks.popleft()
                self._size -= len(first)
                excess -= len(first)
            else:  # keep exactly `limit` bytes: a slice, not a copy
                self._chunks[0] = (first_offset + excess, first_stream, first[excess:])
                self._size -= excess
                excess = 0
        self._start = self._chunks[0][0] if self._chunks else offset + len(data)

    def since(self, cursor: int, limit: int) -> list[tuple[int, OutputStream, bytes]] | None:
        """Up to `limit` bytes from `cursor` as (offset, stream, bytes) pieces, one per stream
        run (as `ArtifactLog.read_labelled` gives them); None when `cursor` is older than
        what is kept (read the log instead) or nobody registered as following."""
        if not self._followers or cursor < self._start:
            return None
        newer: list[tuple[int, OutputStream, memoryview]] = []
        for chunk in reversed(self._chunks):
            if chunk[0] + len(chunk[2]) <= cursor:
                break
            newer.append(chunk)
        pieces: list[tuple[int, OutputStream, list[memoryview]]] = []
        taken = 0
        for offset, stream, view in reversed(newer):
            if taken >= limit:
                break
            low = max(cursor - offset, 0)
            part = view[low : low + limit - taken]
            if pieces and pieces[-1][1] is stream:
                pieces[-1][2].append(part)
            else:
                pieces.append((offset + low, stream, [part]))
            taken += len(part)
        return [(offset, stream, b"".join(parts)) for offset, stream, parts in pieces]
