"""Unpredictable ids for executions, sessions, approvals and file operations, drawn from a pool
of `os.urandom` bytes instead of one `os.urandom` per id.

Each such call gives up the interpreter lock, and a submission makes its id on the event loop:
with worker threads busy the loop then waits up to a switch interval to get the lock back
(`secrets.token_urlsafe` was 3% of the loop's samples under bench/soak.py). The ids stay as
unpredictable as `secrets` makes them — the bytes are the kernel's, read 4 KiB at a time —
and keep the same shape (URL-safe base64 without padding). Secrets proper (tokens, WebSocket
tickets) still come from `secrets`.
"""

from __future__ import annotations

import base64
import os
import threading

POOL_BYTES = 4096


class _UrandomPool:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buffer = b""
        self._used = 0

    def take(self, count: int) -> bytes:
        with self._lock:
            if self._used + count > len(self._buffer):
                self._buffer, self._used = os.urandom(max(POOL_BYTES, count)), 0
            start = self._used
            self._used += count
            return self._buffer[start : start + count]

    def forget(self) -> None:
        """In a forked child: never hand out the bytes the parent will hand out too (and the
        parent's lock may have been held by another thread at the fork)."""
        self._lock = threading.Lock()
        self._buffer, self._used = b"", 0


_pool = _UrandomPool()
os.register_at_fork(after_in_child=_pool.forget)


def random_token(nbytes: int) -> str:
    """`secrets.token_urlsafe(nbytes)`'s shape, from the pool."""
    return base64.urlsafe_b64encode(_pool.take(nbytes)).rstrip(b"=").decode("ascii")
