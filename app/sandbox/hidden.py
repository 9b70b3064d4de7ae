"""Whether a path lies under one the sandbox hides: for the files API, which must not reach
what a command cannot see (docs/sandbox.md)."""

from __future__ import annotations

import os
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
