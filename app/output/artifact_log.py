"""The on-disk merged output log of one execution: the artifact behind `artifact://<id>`.

Files in the log directory, per execution, in the subdirectory named by the id's last two
characters (`artifacts/<id[-2:]>/`), so that no directory holds hundreds of thousands of files
at 100k+ executions (a lookup and a create in a huge ext4 directory slow every call); a log
written flat (`artifacts/<id>.log`, before the shards) is still read and deleted there:
- `<id>.log`  the merged raw bytes, byte-exact while the stream is at most `max_bytes`;
- `<id>.idx`  stream switches: one `<QB` record (logical offset, stream code) each time the
  stream changes, so replayed bytes can be labelled stdout/stderr/pty after a restart;
- `<id>.tail` only beyond `max_bytes`: a ring of the last `max_bytes // 2` bytes, behind a
  `<QQQQ` header (head size, ring size, first logical offset in the ring, logical total);
- `<id>.done` written by `finish()`: JSON with the totals; its presence means complete.

Offsets are always LOGICAL: the byte position in the merged stream since the start, whether
the execution is running or finished, and whether or not the log was truncated. A viewer can
therefore resume at the same offset across `finish()` and across a server restart. Past
`max_bytes` the log keeps the head `[0, max_bytes // 2)` and the tail
`[total - max_bytes // 2, total)`; offsets in between were evicted: `read` returns `b""` there
and `next_available(offset)` names the offset to jump to (the start of the tail). After
`finish()` a truncated `<id>.log` is rewritten as head + `[ARTIFACT TRUNCATED: …]` marker +
tail (what a command reading the artifact path sees); `read` still speaks logical offsets and
maps them onto that file, skipping the marker.

Threading: one writer (`append`, then `finish`) and any number of reader threads.
Bytes of `<id>.log` are never changed in place (the finishing rewrite replaces the file), so
readers open their own descriptor under the lock and read without it; only reads of the ring,
whose slots the writer reuses, happen under the lock. `append` is one `pwrite` of at most one
read of output (128 KiB) to the page cache — 21 µs median, 87 µs p99 here — and is called on
the event loop; every other call does file I/O whose time grows with the data or stalls on
metadata (`finish`: 0.12 ms median, 22 ms p99 on this VM's ext4): call those from a thread.
"""

from __future__ import annotations

import json
import os
import re
import struct
import threading
from pathlib import Path
from typing import Final

from app.output.window import format_bytes
from app.process import OutputStream

DEFAULT_MAX_BYTES: Final = 256 * 1024 * 1024

_INDEX_RECORD: Final = struct.Struct("<QB")
_RING_HEADER: Final = struct.Struct("<QQQQ")
_COPY_BLOCK: Final = 1024 * 1024
_INDEX_BATCH: Final = 512
_EXECUTION_ID_RE: Final = re.compile(r"[A-Za-z0-9_-]{1,128}")

# Extent sources: which file a piece of the logical stream lives in.
_LOG: Final = 0
_RING: Final = 1


_STREAM_CODES: Final = {OutputStream.stdout: 1, OutputStream.stderr: 2, OutputStream.pty: 3}
_STREAMS_BY_CODE: Final = {code: stream for stream, code in _STREAM_CODES.items()}


def shard_directory(directory: Path, execution_id: str) -> Path:
    """Where the files of `execution_id`'s log live: a subdirectory per last two characters of
    the id (the id's random end, so the shards fill evenly)."""
    return directory / execution_id[-2:]


def artifact_log_path(directory: Path, execution_id: str) -> Path:
    """The `<id>.log` a new execution writes (its `artifact_path`)."""
    return shard_directory(directory, execution_id) / f"{execution_id}.log"


def existing_log_path(directory: Path, execution_id: str) -> Path | None:
    """The `<id>.log` on disk, sharded or flat (a log written before the shards), or None.
    Blocking: call it off the event loop."""
    sharded = artifact_log_path(directory, execution_id)
    if sharded.exists():
        return sharded
    flat = directory / f"{execution_id}.log"
    return flat if flat.exists() else None


def truncation_marker(head_bytes: int, tail_bytes: int, total_bytes: int) -> bytes:
    """The line that stands for the evicted middle in a finished truncated log."""
    elided = total_bytes - head_bytes - tail_bytes
    return (
        f"\n[ARTIFACT TRUNCATED: kept first {format_bytes(head_bytes)} + last "
        f"{format_bytes(tail_bytes)} of {format_bytes(total_bytes)}; "
        f"{format_bytes(elided)} elided from the middle]\n"
    ).encode()


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _pwrite_all(fd: int, data: bytes | memoryview, position: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        view, position = view[written:], position + written


def _pread_exact(fd: int, length: int, position: int) -> bytes:
    pieces: list[bytes] = []
    while length > 0:
        piece = os.pread(fd, length, position)
        if not piece:
            break
        pieces.append(piece)
        length -= len(piece)
        position += len(piece)
    return b"".join(pieces)


class ArtifactLog:
    """The merged output log of one execution; see the module docstring for the layout."""

    def __init__(self, directory: Path, execution_id: str, *, flat: bool = False) -> None:
        """Use `create` or `open_existing`. `directory` is the artifacts directory; the files
        go in its shard for the id, or in it directly for a `flat` (legacy) log."""
        if not _EXECUTION_ID_RE.fullmatch(execution_id):
            raise ValueError(f"unsafe execution id for a file name: {execution_id!r}")
        if not flat:
            directory = shard_directory(directory, execution_id)
        self._lock = threading.Lock()
        self.path = directory / f"{execution_id}.log"
        self._index_path = directory / f"{execution_id}.idx"
        self._ring_path = directory / f"{execution_id}.tail"
        self._done_path = directory / f"{execution_id}.done"
        self._max_bytes = 0
        self._head_size = 0
        self._ring_size = 0
        self._total = 0
        # None until the stream first passes max_bytes; then the first logical offset that went
        # to the ring (earlier tail bytes are still in <id>.log, which is never cut back).
        self._ring_start: int | None = None
        self._assembled = False  # <id>.log is head + marker + tail
        self._marker_size = 0
        self._complete = False
        self._finishing = False
        self._log_fd: int | None = None  # writer descriptors: set only on a log being written
        self._index_fd: int | None = None
        self._ring_fd: int | None = None
        self._stream: OutputStream | None = None
        self._index_count = 0
        self._on_disk = True  # False only for a `new` log until `start()`

    @classmethod
    def create(
        cls, directory: Path, execution_id: str, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> ArtifactLog:
        """Start the log of a new execution (refuses to overwrite an existing one)."""
        log = cls.new(directory, execution_id, max_bytes)
        log.start()
        return log

    @classmethod
    def new(
        cls, directory: Path, execution_id: str, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> ArtifactLog:
        """The log of a new execution, with no file yet: `start()` creates them. The event
        loop makes the object; a worker thread starts it, since opening files on the loop
        stalls every request while the disk is busy (in bench/soak.py the two creates took a
        tenth of the loop's time, ≈ 2.5 ms per execution)."""
        if max_bytes < 2:
            raise ValueError("max_bytes must be at least 2")
        log = cls(directory, execution_id)
        log._max_bytes = max_bytes
        log._head_size = log._ring_size = max_bytes // 2
        log._on_disk = False
        return log

    @property
    def started(self) -> bool:
        """Whether the log's files exist (always, but for a `new` log not yet started)."""
        return self._on_disk

    def start(self) -> None:
        """Create the files of a `new` log (blocking: call it off the event loop)."""
        # Written with pwrite at the logical position rather than O_APPEND, so a failed
        # write (a full disk) that left part of a chunk behind is overwritten by the next one.
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        try:
            log_fd = os.open(self.path, flags, 0o600)
        except FileNotFoundError:
            # The directory is made when it is missing (the first log), not before every log.
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            log_fd = os.open(self.path, flags, 0o600)
        try:
            index_fd = os.open(self._index_path, flags, 0o600)
        except BaseException:
            os.close(log_fd)
            self.path.unlink(missing_ok=True)
            raise
        with self._lock:
            self._log_fd, self._index_fd = log_fd, index_fd
            self._on_disk = True

    @classmethod
    def open_existing(cls, directory: Path, execution_id: str) -> ArtifactLog:
        """Read side of a log written earlier, finished or not (e.g. lost in a restart).

        `finish()` on it settles an unfinished log: truncated ones are rewritten with the
        marker and all are marked complete.
        """
        log = cls(directory, execution_id)
        try:
            size = log.path.stat().st_size
        except FileNotFoundError:
            log = cls(directory, execution_id, flat=True)  # written before the shards
            size = log.path.stat().st_size  # FileNotFoundError for an unknown id
        log._index_count = log._file_size(log._index_path) // _INDEX_RECORD.size
        if log._done_path.exists():
            done = json.loads(log._done_path.read_text())
            log._total = int(done["total_bytes"])
            log._complete = True
            if done["truncated"]:
                log._set_assembled(int(done["head_bytes"]), int(done["tail_bytes"]))
            return log
        header = b""
        if log._ring_path.exists():
            with log._ring_path.open("rb") as ring:
                header = ring.read(_RING_HEADER.size)
        if len(header) < _RING_HEADER.size:
            log._total = size
            return log
        head, ring, ring_start, total = _RING_HEADER.unpack(header)
        log._total = total
        if size == head + len(truncation_marker(head, ring, total)) + ring:
            # finish() got as far as replacing <id>.log before it stopped.
            log._set_assembled(head, ring)
        else:
            log._head_size, log._ring_size, log._ring_start = head, ring, ring_start
        return log

    @property
    def total_bytes(self) -> int:
        """Logical size of the stream so far (beyond what a truncated log still holds)."""
        return self._total

    @property
    def complete(self) -> bool:
        return self._complete

    @property
    def kept_tail_bytes(self) -> int:
        """How many of the latest bytes a log being written always keeps, however long the
        stream: an offset within them is never in an evicted middle (app/output/live_edge.py)."""
        return self._ring_size

    @property
    def truncated(self) -> bool:
        """Whether the stream passed max_bytes, so its middle was evicted."""
        return self._ring_start is not None

    def append(self, data: bytes, stream: OutputStream) -> int:
        """Add the next bytes of the merged stream; returns the new logical total.

        One `os.pwrite` in the common case, no fsync. An OSError (a full disk) leaves the
        total unchanged, and the next append writes at the same position.
        """
        with self._lock:
            if self._log_fd is None or self._index_fd is None:
                raise RuntimeError(f"{self.path.name} is not open for writing")
            if not data:
                return self._total
            if stream is not self._stream:
                record = _INDEX_RECORD.pack(self._total, _STREAM_CODES[stream])
                _pwrite_all(self._index_fd, record, self._index_count * _INDEX_RECORD.size)
                self._stream = stream
                self._index_count += 1
            total = self._total + len(data)
            if self._ring_start is None and total <= self._max_bytes:
                _pwrite_all(self._log_fd, data, self._total)
            else:
                self._append_past_cap(data, total, self._log_fd)
            self._total = total
            return total

    def finish(self) -> None:
        """Close the writer and mark the log complete. Idempotent.

        A truncated log is rewritten as head + marker + tail and its ring removed.
        """
        with self._lock:
            if self._complete or self._finishing or not self._on_disk:
                return
            self._finishing = True
            if self._log_fd is not None and self._ring_start is None:
                os.ftruncate(self._log_fd, self._total)  # drop what a failed append left behind
            for fd in (self._log_fd, self._index_fd):
                if fd is not None:
                    os.close(fd)
            self._log_fd = self._index_fd = None
        # No more appends: the ring is frozen, so it can be copied without the lock.
        assembled_tmp = None
        if self._ring_start is not None and not self._assembled:
            try:
                assembled_tmp = self._write_assembled_copy()
            except BaseException:
                self._finishing = False  # e.g. a full disk: a later finish() may retry
                raise
        with self._lock:
            if self._ring_fd is not None:
                os.close(self._ring_fd)
                self._ring_fd = None
            if assembled_tmp is not None:
                os.replace(assembled_tmp, self.path)
                self._set_assembled(self._head_size, self._ring_size)
            self._ring_path.unlink(missing_ok=True)
            done = {
                "total_bytes": self._total,
                "truncated": self.truncated,
                "head_bytes": self._head_size,
                "tail_bytes": self._ring_size,
            }
            done_tmp = self._done_path.with_name(self._done_path.name + ".tmp")
            fd = os.open(done_tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w") as handle:  # private: the totals name the command's output
                handle.write(json.dumps(done))
            os.replace(done_tmp, self._done_path)
            self._complete = True

    def next_available(self, offset: int) -> int:
        """`offset`, or the first offset still stored when `offset` was evicted.

        A viewer whose `read` came back empty below `total_bytes` jumps here. While the
        stream keeps running past the cap the tail moves on, so the jump may need repeating.
        """
        with self._lock:
            if self._ring_start is not None:
                tail_start = self._total - self._ring_size
                if self._head_size <= offset < tail_start:
                    return tail_start
            return offset

    def read(self, offset: int, limit: int) -> bytes:
        """Up to `limit` bytes of the logical stream from `offset`.

        Returns fewer only at the end of what is written so far or at the evicted middle of a
        truncated log (then `b""` at `offset`; see `next_available`).
        """
        if offset < 0 or limit < 0:
            raise ValueError("offset and limit must be >= 0")
        with self._lock:
            end = min(self._total, offset + limit)
            extents = self._extents(offset, end) if offset < end else []
            if not extents:
                return b""
            if self._ring_start is not None and not self._assembled:
                # The writer reuses ring slots: read them before it can append again.
                return self._read_extents(extents)
            # Opened under the lock so it holds the inode these extents describe, even if
            # finish() replaces the file before the read below.
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return b"".join(_pread_exact(fd, length, position) for _, position, length in extents)
        finally:
            os.close(fd)

    def read_labelled(self, offset: int, limit: int) -> list[tuple[int, OutputStream, bytes]]:
        """`read`, split where the stream changes: (logical offset, stream, bytes) pieces."""
        data = self.read(offset, limit)
        if not data:
            return []
        end = offset + len(data)
        switches = self._switches(offset, end)
        pieces: list[tuple[int, OutputStream, bytes]] = []
        for i, (start, stream) in enumerate(switches):
            start = offset if i == 0 else start
            stop = switches[i + 1][0] if i + 1 < len(switches) else end
            if stop > start:
                pieces.append((start, stream, data[start - offset : stop - offset]))
        return pieces

    def delete(self) -> None:
        """Remove every file of this log (retention pruning). Open readers finish unharmed."""
        with self._lock:
            if not self._on_disk:
                return  # a `new` log never started has no file to remove
            for fd in (self._log_fd, self._index_fd, self._ring_fd):
                if fd is not None:
                    os.close(fd)
            self._log_fd = self._index_fd = self._ring_fd = None
            for path in (self.path, self._index_path, self._ring_path, self._done_path):
                path.unlink(missing_ok=True)
                path.with_name(path.name + ".tmp").unlink(missing_ok=True)

    # -- internals -----------------------------------------------------------------------

    def _append_past_cap(self, data: bytes, total: int, log_fd: int) -> None:
        """Keep the head in <id>.log and the last ring_size bytes in the ring."""
        before = self._total
        if self._ring_start is None:
            if before < self._head_size:
                _pwrite_all(log_fd, data[: self._head_size - before], before)
            self._ring_start = max(before, self._head_size)
            flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
            self._ring_fd = os.open(self._ring_path, flags, 0o600)
        assert self._ring_fd is not None
        start = max(before, self._ring_start, total - self._ring_size)
        view = memoryview(data)[start - before :]
        while view:
            slot = start % self._ring_size
            piece = view[: self._ring_size - slot]
            _pwrite_all(self._ring_fd, piece, _RING_HEADER.size + slot)
            view, start = view[len(piece) :], start + len(piece)
        header = _RING_HEADER.pack(self._head_size, self._ring_size, self._ring_start, total)
        _pwrite_all(self._ring_fd, header, 0)

    def _set_assembled(self, head_size: int, ring_size: int) -> None:
        self._head_size, self._ring_size = head_size, ring_size
        if self._ring_start is None:  # opened from disk: only "truncated or not" matters now
            self._ring_start = head_size
        self._marker_size = len(truncation_marker(head_size, ring_size, self._total))
        self._assembled = True

    def _extents(self, offset: int, end: int) -> list[tuple[int, int, int]]:
        """(source, file position, length) pieces holding [offset, end), up to the first gap."""
        if self._ring_start is None:
            return [(_LOG, offset, end - offset)]
        tail_start = self._total - self._ring_size
        if offset < self._head_size:
            return [(_LOG, offset, min(end, self._head_size) - offset)]
        if offset < tail_start:
            return []
        if self._assembled:
            shift = self._head_size + self._marker_size - tail_start
            return [(_LOG, offset + shift, end - offset)]
        extents: list[tuple[int, int, int]] = []
        if offset < self._ring_start:
            stop = min(end, self._ring_start)
            extents.append((_LOG, offset, stop - offset))
            offset = stop
        while offset < end:
            slot = offset % self._ring_size
            length = min(end - offset, self._ring_size - slot)
            extents.append((_RING, _RING_HEADER.size + slot, length))
            offset += length
        return extents

    def _read_extents(self, extents: list[tuple[int, int, int]]) -> bytes:
        paths = {_LOG: self.path, _RING: self._ring_path}
        fds = {
            source: os.open(paths[source], os.O_RDONLY | os.O_CLOEXEC) for source, _, _ in extents
        }
        try:
            return b"".join(
                _pread_exact(fds[source], length, position) for source, position, length in extents
            )
        finally:
            for fd in fds.values():
                os.close(fd)

    def _write_assembled_copy(self) -> Path:
        """Write head + marker + tail to `<id>.log.tmp`, a block at a time."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        tail_start = self._total - self._ring_size
        extents = [(_LOG, 0, self._head_size), *self._extents(tail_start, self._total)]
        marker = truncation_marker(self._head_size, self._ring_size, self._total)
        paths = {_LOG: self.path, _RING: self._ring_path}
        fds = {source: os.open(paths[source], os.O_RDONLY | os.O_CLOEXEC) for source in paths}
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            for i, (source, position, length) in enumerate(extents):
                if i == 1:
                    _write_all(out, marker)
                for block in range(position, position + length, _COPY_BLOCK):
                    size = min(_COPY_BLOCK, position + length - block)
                    _write_all(out, _pread_exact(fds[source], size, block))
        finally:
            os.close(out)
            for fd in fds.values():
                os.close(fd)
        return tmp

    def _switches(self, offset: int, end: int) -> list[tuple[int, OutputStream]]:
        """The stream in effect at `offset`, then each switch before `end`."""
        with self._lock:
            count = self._index_count
        if count == 0:
            return [(0, OutputStream.stdout)]
        size = _INDEX_RECORD.size
        fd = os.open(self._index_path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            # Binary search for the last record at or before `offset`.
            low, high = 0, count
            while low < high:
                middle = (low + high) // 2
                start, _ = _INDEX_RECORD.unpack(_pread_exact(fd, size, middle * size))
                if start <= offset:
                    low = middle + 1
                else:
                    high = middle
            switches: list[tuple[int, OutputStream]] = []
            for batch_start in range(max(low - 1, 0), count, _INDEX_BATCH):
                batch = min(_INDEX_BATCH, count - batch_start)
                records = _pread_exact(fd, batch * size, batch_start * size)
                for start, code in _INDEX_RECORD.iter_unpack(records):
                    if start >= end and switches:
                        return switches
                    switches.append((start, _STREAMS_BY_CODE.get(code, OutputStream.stdout)))
            return switches
        finally:
            os.close(fd)

    @staticmethod
    def _file_size(path: Path) -> int:
        try:
            return path.stat().st_size
        except FileNotFoundError:
            return 0
