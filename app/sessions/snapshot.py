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

The session's directory is the server's, but a sandboxed call spawned without a standby has it
bound in to write its snapshot: its command can put anything there by any name, a symbolic
link or a FIFO included. The server follows no link there and opens nothing there but regular
files (`open_own_file`): a `state.sh` made a link to a hidden file (an operator's `.env`) was
read through it into the next call's shell, and a `state.next` made a link was written through.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

# The last line of every snapshot the wrapper finished writing (a comment when sourced).
SNAPSHOT_END = b"# end of the session's snapshot\n"
_SLICE = 1024 * 1024


class NotOwnFile(OSError):
    """A name in the session's directory that is not a regular file (a link, a FIFO, a
    directory): the server makes only regular files there, and opens nothing else."""

    def __init__(self, path: Path) -> None:
        super().__init__(errno.EINVAL, "not a regular file", str(path))


def open_own_file(path: Path, flags: int = os.O_RDONLY) -> int:
    """A regular file of the session's directory, opened with `flags`, never through a link
    (ELOOP, raised as NotOwnFile) nor blocking on a FIFO; NotOwnFile for anything else that
    is not a regular file. OSError as the kernel says otherwise (FileNotFoundError when absent,
    unless `flags` create it)."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
            raise NotOwnFile(path) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotOwnFile(path)
    return fd


def install_state(saved: Path, state: Path) -> None:
    """Make `saved` (what the owning call's EXIT trap wrote) the session's state, when the
    trap finished writing it. Most calls change nothing: then the snapshot is left as it is
    (no rename, no journal write). The caller empties `saved`. One that is not a regular file
    changes nothing (NotOwnFile)."""
    source = open_own_file(saved)
    try:
        if not _finished(source) or _same_as_state(source, state):
            return
    finally:
        os.close(source)
    # Renamed by name: were `saved` swapped for a link meanwhile, the state would be that
    # link, which nothing here reads through.
    os.replace(saved, state)


def install_saved_memory(saved_fd: int, state: Path, working: Path) -> None:
    """The same for a snapshot saved into a memory file: copied to `working` (in the
    session's directory, beside `state`) and renamed over the state when it differs. A
    `working` that is not a regular file is removed first, never written through."""
    if not _finished(saved_fd) or _same_as_state(saved_fd, state):
        return
    # It holds the session's variables, secrets included: owner-only, as the wrapper's are.
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    try:
        target = open_own_file(working, flags)
    except NotOwnFile:
        try:
            os.unlink(working)  # a link or a FIFO goes
        except OSError as error:  # a directory stays, and the state with it
            raise NotOwnFile(working) from error
        target = open_own_file(working, flags | os.O_EXCL)
    try:
        os.fchmod(target, 0o600)
        _copy(saved_fd, target)
    finally:
        os.close(target)
    os.replace(working, state)


def copy_state_into(state: Path, fd: int) -> None:
    """The session's snapshot (none yet: nothing) into the empty memory file `fd`, from its
    start; the file's own offset stays at 0 (the command opens it by a path of its own).
    NotOwnFile when `state` is not a regular file."""
    try:
        source = open_own_file(state)
    except FileNotFoundError:
        return
    try:
        _copy(source, fd)
    finally:
        os.close(source)


def _finished(fd: int) -> bool:
    size = os.fstat(fd).st_size
    end = len(SNAPSHOT_END)
    return size >= end and os.pread(fd, end, size - end) == SNAPSHOT_END


def _same_as_state(saved_fd: int, state: Path) -> bool:
    try:
        current = open_own_file(state)
    except (FileNotFoundError, NotOwnFile):
        return False
    try:
        return _same_content(saved_fd, current)
    finally:
        os.close(current)


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
