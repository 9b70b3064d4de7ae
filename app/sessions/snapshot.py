"""A session's snapshot on disk (`state.sh`), and how the one a call saved becomes it.

A call saves through its wrapper's EXIT trap (app/sessions/session_wrapper.sh) into a file of
the session's directory or, when a standby shell ran it, into a memory file the standby held
(app/process/standby.py: a standby's sandbox was built before anyone knew which session's
directory to show it). Either way the trap ends what it wrote with `SNAPSHOT_END`: a shell
killed before or while writing (`kill -9 $$`, the OOM killer) leaves no such line, and the
session keeps the state it had rather than an empty or cut one.

A snapshot is as large as what the session's commands export and define (50 MB of exported
variable is one `export`): it is compared a slice at a time, never read whole twice
(RELIABILITY.md, "One request against all the others").
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

# The last line of every snapshot the wrapper finished writing (a comment when sourced).
SNAPSHOT_END = b"# end of the session's snapshot\n"
_SLICE = 1024 * 1024


def install_state(saved: Path, state: Path) -> None:
    """Make `saved` (what the owning call's EXIT trap wrote) the session's state, when the
    trap finished writing it. Most calls change nothing: then the snapshot is left as it is
    (no rename, no journal write). The caller empties `saved`."""
    with saved.open("rb") as source:
        if not _finished(source.fileno()) or _same_as_state(source.fileno(), state):
            return
    os.replace(saved, state)


def install_saved_memory(saved_fd: int, state: Path, working: Path) -> None:
    """The same for a snapshot saved into a memory file: copied to `working` (in the
    session's directory, beside `state`) and renamed over the state when it differs."""
    if not _finished(saved_fd) or _same_as_state(saved_fd, state):
        return
    # It holds the session's variables, secrets included: owner-only, as the wrapper's are.
    target = os.open(working, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(target, 0o600)
        _copy(saved_fd, target)
    finally:
        os.close(target)
    os.replace(working, state)


def copy_state_into(state: Path, fd: int) -> None:
    """The session's snapshot (none yet: nothing) into the empty memory file `fd`, from its
    start; the file's own offset stays at 0 (the command opens it by a path of its own)."""
    with contextlib.suppress(FileNotFoundError), state.open("rb") as source:
        _copy(source.fileno(), fd)


def _finished(fd: int) -> bool:
    size = os.fstat(fd).st_size
    end = len(SNAPSHOT_END)
    return size >= end and os.pread(fd, end, size - end) == SNAPSHOT_END


def _same_as_state(saved_fd: int, state: Path) -> bool:
    try:
        with state.open("rb") as current:
            return _same_content(saved_fd, current.fileno())
    except FileNotFoundError:
        return False


def _same_content(one: int, other: int) -> bool:
    size = os.fstat(one).st_size
    if os.fstat(other).st_size != size:
        return False
    return all(
        os.pread(one, _SLICE, offset) == os.pread(other, _SLICE, offset)
        for offset in range(0, size, _SLICE)
    )


def _copy(source_fd: int, target_fd: int) -> None:
    """All of `source_fd` to the start of `target_fd`, a slice at a time (pread/pwrite: no
    offset of either moves)."""
    offset = 0
    while piece := os.pread(source_fd, _SLICE, offset):
        written = 0
        while written < len(piece):
            written += os.pwrite(target_fd, piece[written:], offset + written)
        offset += len(piece)
