"""Where a command runs: one spelling of the working directory for the policy, the approver
and the spawn alike, so that what is judged and shown is what runs."""

from __future__ import annotations

import os
from pathlib import Path

from app.core.errors import InvalidRequestError


def working_directory(cwd_request: str | None, base: str) -> str:
    """An absolute, normalised path: `~` expanded, a relative path joined to `base`, no-break
    spaces read as spaces. No file system access (existence is checked at spawn). A NUL can
    name no directory (and `~` + NUL made the user lookup raise): 422."""
    if not cwd_request:
        return os.path.normpath(base)
    if "\0" in cwd_request:
        raise InvalidRequestError("cwd must not contain a NUL byte")
    text = cwd_request.replace("\u00a0", " ").replace("\u202f", " ")
    path = Path(os.path.expanduser(text))
    if not path.is_absolute():
        path = Path(base) / path
    return os.path.normpath(str(path))
