"""Reading a non-blocking descriptor on the event loop without giving the interpreter lock away.

`os.read` releases the interpreter lock around every `read(2)`, as any blocking call must. On
the loop that costs more than the read: when a worker thread (the database's, the output
worker cleaning binary output, a stream's framing) is running Python, the loop gets the lock
back only after a switch interval, or after the worker's current C call ends. Measured on the
2-core VM with 64 KiB waiting in a pipe (tests keep no timing; this is the why): a read took
0.09 ms with no busy thread, 0.5-0.7 ms with three to six, where a read that keeps the lock took
0.011 ms whatever the threads did. The loop does one read per ready descriptor per turn (a
terminal: one per few KiB), so under load every turn paid that for each running command, and
`/healthz` waited behind the turn (RELIABILITY.md, "Soak").

The descriptors read here are non-blocking, so `read(2)` returns at once and holding the lock
through it never stalls the other threads for longer than the copy. The read goes into one
buffer per thread (the loop's), reused, so a read does not allocate (and map, then unmap) a
READ-sized bytes object either; the bytes handed on are one copy of what was read.

Where the C library cannot be loaded this way, `os.read` is used.
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading
from collections.abc import Callable

# The most one wake-up's reads may take in all (RunningProcess.READ_SIZE is 256 KiB).
BUFFER_SIZE = 512 * 1024


def _lock_keeping_read() -> Callable[[int, int, int], int] | None:
    try:
        # PyDLL, not CDLL: the call keeps the interpreter lock.
        libc = ctypes.PyDLL(None, use_errno=True)
        read: Callable[[int, int, int], int] = libc.read
    except (OSError, AttributeError):
        return None
    read.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]  # type: ignore[attr-defined]
    read.restype = ctypes.c_ssize_t  # type: ignore[attr-defined]
    return read


_read = _lock_keeping_read()


class _Buffer(threading.local):
    def __init__(self) -> None:
        self.data = bytearray(BUFFER_SIZE)
        # Kept: while this view exists the bytearray cannot be resized, so the address holds.
        self.view = (ctypes.c_char * BUFFER_SIZE).from_buffer(self.data)
        self.address = ctypes.addressof(self.view)


_buffer = _Buffer()


class LoopReader:
    """Reads into the calling thread's buffer: `read_into(fd, n)` appends up to `n` bytes
    after what this reader already holds; `take()` returns them as bytes and empties it.
    One reader is used for one wake-up's reads, then taken, before any other reads begin
    (the loop runs one callback at a time)."""

    def __init__(self) -> None:
        self._filled = 0

    def read_into(self, fd: int, size: int) -> int:
        """Bytes read (0 at EOF); raises BlockingIOError when there is nothing to read, and
        OSError for any other failure, as `os.read` does."""
        if size > BUFFER_SIZE - self._filled:
            raise ValueError(f"a read of {size} bytes does not fit in the loop's read buffer")
        if _read is None:
            piece = os.read(fd, size)
            _buffer.data[self._filled : self._filled + len(piece)] = piece
            self._filled += len(piece)
            return len(piece)
        while True:
            count = _read(fd, _buffer.address + self._filled, size)
            if count >= 0:
                self._filled += count
                return int(count)
            code = ctypes.get_errno()
            if code == errno.EINTR:
                continue
            # EAGAIN makes this a BlockingIOError, as from os.read.
            raise OSError(code, os.strerror(code))

    def take(self) -> bytes:
        data = bytes(memoryview(_buffer.data)[: self._filled])
        self._filled = 0
        return data
