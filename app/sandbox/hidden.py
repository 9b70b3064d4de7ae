"""Whether a path lies under one the sandbox hides: for the files API, which must not reach
what a command cannot see (docs/sandbox.md)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable


class HiddenPaths:
    def __init__(self, paths: Iterable[str]) -> None:
        # Both spellings: as configured, and with its symlinks followed.
        spelled = {os.path.normpath(path) for path in paths}
        self._paths = tuple(sorted(spelled | {os.path.realpath(path) for path in spelled}))

    def covering(self, path: str) -> str | None:
        """The hidden path `path` is (or lies under), or None."""
        normal = os.path.normpath(path)
        for hidden in self._paths:
            if normal == hidden or normal.startswith(hidden.rstrip("/") + "/"):
                return hidden
        return None

    def same_file(self, info: os.stat_result) -> str | None:
        """The hidden regular file that `info` (a file reached by another path) is, as a hard
        link to it, or None (blocking: it stats each hidden path). The hidden directories'
        contents are not searched: the data directory holds every output log."""
        for hidden in self._paths:
            try:
                other = os.stat(hidden)
            except OSError:
                continue
            if stat.S_ISREG(other.st_mode) and (other.st_dev, other.st_ino) == (
                info.st_dev,
                info.st_ino,
            ):
                return hidden
        return None
