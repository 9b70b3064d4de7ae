"""Whether the data directory has room for new work, and a reserve for when it has not.

A command's log, the SQLite registry and the session state all live in the data directory.
When a log write fails for lack of space, the running command keeps the bytes it managed to
write and its record must still be written: the guard then deletes a small reserve file it
keeps there, so that the final records fit, and refuses new work (readiness fails,
submissions get `storage_full`) until space returns and the reserve is back.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
from pathlib import Path

logger = logging.getLogger("shellgate.storage")

RESERVE_BYTES = 2 * 1024 * 1024
RESERVE_FILE = ".storage-reserve"
OUTPUT_STORAGE_FULL_NOTICE = "Output storage full"


def is_storage_full(error: BaseException) -> bool:
    """A write failed for lack of space (ENOSPC), quota (EDQUOT) or file-size limit (EFBIG)."""
    return isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def free_bytes(directory: Path) -> int:
    stats = os.statvfs(directory)
    return stats.f_bavail * stats.f_frsize


class StorageGuard:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._reserve = directory / RESERVE_FILE
        self._lock = threading.Lock()
        self._full = False

    @property
    def full(self) -> bool:
        return self._full

    def release_reserve(self) -> None:
        """Space ran out (any thread): free the reserve so records can still be written."""
        with self._lock:
            if not self._full:
                logger.error("the data directory %s is full", self.directory)
            self._full = True
            with contextlib.suppress(OSError):
                self._reserve.unlink()

    def has_room(self) -> bool:
        """True when new work may start. Blocking (it may write the reserve): call it from a
        worker thread."""
        with self._lock:
            try:
                if self._reserve.exists() and not self._full:
                    # Filled by someone else: refuse before a write of ours fails half-way.
                    return free_bytes(self.directory) >= RESERVE_BYTES
                if free_bytes(self.directory) < 2 * RESERVE_BYTES:
                    return False
                self._write_reserve()
            except OSError as error:
                if not is_storage_full(error):
                    logger.warning("cannot check the space in %s: %s", self.directory, error)
                return False
            if self._full:
                logger.warning("the data directory %s has room again", self.directory)
            self._full = False
            return True

    def _write_reserve(self) -> None:
        partial = self._reserve.with_name(RESERVE_FILE + ".tmp")
        try:
            # Private like every file of the data dir (0600), whatever the umask.
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            with open(fd, "wb") as file:
                # Real blocks (not a sparse file): the space is taken now and given back later.
                os.posix_fallocate(file.fileno(), 0, RESERVE_BYTES)
            os.replace(partial, self._reserve)
        except BaseException:
            with contextlib.suppress(OSError):
                partial.unlink()
            raise
