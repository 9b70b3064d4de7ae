"""One server per data directory and node: an exclusive `flock` on a file there, held as long
as the returned descriptor (the server process) lives, never inherited by the commands it runs
(O_CLOEXEC). It holds the holder's pid, so a refused start can name it."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class InstanceLockedError(Exception):
    def __init__(self, holder: str) -> None:
        super().__init__(f"held by pid {holder}")
        self.holder = holder


def hold_instance_lock(path: Path) -> int:
    """The descriptor holding the lock; InstanceLockedError when another process holds it."""
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(descriptor, 32, 0).decode(errors="replace").strip() or "?"
        os.close(descriptor)
        raise InstanceLockedError(holder) from None
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
    return descriptor
