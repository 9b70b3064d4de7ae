"""Where a requested path leads: absolute and normalised as written (relative paths join the
workspace, `~` expands, `..` is folded), and the same with every symlink followed. Both are
judged by the policy; the operation itself acts on the resolved one."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass

from app.core.errors import (
    AppError,
    ConflictError,
    DescriptorsExhaustedError,
    ForbiddenError,
    InvalidRequestError,
    NotFoundError,
    StorageFullError,
    is_descriptors_exhausted,
)
from app.files.no_links import LinkOnPath, open_directory

# PATH_MAX on Linux: no longer path can name a file.
MAX_PATH_BYTES = 4096


# The kernel's view of processes: the server's own among them (its environment holds every
# token). A sandboxed command sees there only its own processes; the files API, which runs as
# the server, serves none of it (docs/sandbox.md#the-files-api). A read of such a file reads
# what the kernel makes up for the reader, whatever its size says (0).
PROCESS_FILES = "/proc"


@dataclass(frozen=True, slots=True)
class Located:
    requested: str
    path: str  # absolute, normalised, symlinks as written
    resolved: str  # symlinks followed (the parts that exist)
    # The directories followed, the last name as written: where a link such as /dev/fd/3 or
    # /proc/self lives, when `resolved` has gone on to what it names.
    parent_resolved: str = ""

    def in_process_files(self) -> str | None:
        """The first of its paths within PROCESS_FILES, if one is."""
        for candidate in (self.path, self.parent_resolved, self.resolved):
            if candidate == PROCESS_FILES or candidate.startswith(PROCESS_FILES + "/"):
                return candidate
        return None


def locate(requested: str, workspace: str) -> Located:
    """Blocking (it reads symlinks): call it from a worker thread. Raises InvalidRequestError
    for text that cannot be a path."""
    if not requested:
        raise InvalidRequestError("path is required")
    if "\x00" in requested:
        raise InvalidRequestError("path contains a NUL character")
    try:
        encoded = os.fsencode(requested)
    except UnicodeEncodeError:
        raise InvalidRequestError("path is not text the file system can name") from None
    if len(encoded) > MAX_PATH_BYTES:
        raise InvalidRequestError(f"path is longer than {MAX_PATH_BYTES} bytes")
    # Not `working_directory()`: it reads no-break spaces as spaces, right for a typed cwd but
    # wrong for a file whose name has one.
    expanded = os.path.expanduser(requested)
    path = os.path.normpath(os.path.join(workspace, expanded))
    try:
        resolved = os.path.realpath(path)
    except (OSError, ValueError) as error:
        raise InvalidRequestError(f"path cannot be resolved: {error}") from None
    if not _utf8(resolved):
        # A symlink (or a directory) on the way, made by a command, names bytes that are not
        # UTF-8: the record, the policy's globs and every answer carry paths as text, so such a
        # file cannot be named here (it raised out of the record's insert, a 500).
        shown = os.fsencode(resolved).decode("utf-8", "backslashreplace")  # `\xff` for 0xff
        raise ConflictError(
            f"{path} leads to {shown}, a name that is not UTF-8: the file API names files by "
            "UTF-8 paths only"
        )
    parent, name = os.path.split(path)
    parent_resolved = os.path.join(os.path.realpath(parent), name) if name else resolved
    return Located(requested, path, resolved, parent_resolved)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a byte of a name that is not UTF-8, as os.fsdecode keeps it
        return False
    return True


def names_a_directory(requested: str) -> bool:
    """`dir/`, `dir/.` and `dir/..` name a directory, whether or not one exists there: POSIX
    never creates a file by such a name, but normalising (`locate`) would drop the hint."""
    return requested.endswith("/") or os.path.basename(requested) in (".", "..")


def missing_directories(located: Located) -> list[str]:
    """The directories `parents=true` would make for a file at `located`, outermost first, as
    paths written under the file's own (blocking: it stats; call it from a worker thread).
    Empty when the file's directory exists. Walking up the resolved path: the parts that do not
    exist are exactly the ones `realpath` could not follow, so they spell the same in both."""
    missing: list[str] = []
    directory = os.path.dirname(located.resolved)
    while directory != "/" and not os.path.lexists(directory):
        missing.append(directory)
        directory = os.path.dirname(directory)
    missing.reverse()
    return missing


def make_directories(directories: list[str], shown: str) -> None:
    """Make each of `directories` (outermost first) that is still missing (blocking). A part
    that exists by now is taken as it is; one that is not a directory fails as the upload
    would. Each is made in its parent as opened without following a link
    (app/files/no_links.py)."""
    for directory in directories:
        parent, name = os.path.split(directory)
        try:
            parent_fd = open_directory(parent)
        except OSError as error:
            raise os_error(error, shown) from None
        try:
            os.mkdir(name, 0o755, dir_fd=parent_fd)
        except FileExistsError:
            continue
        except OSError as error:
            raise os_error(error, shown) from None
        finally:
            os.close(parent_fd)


def workspace_roots(workspace: str) -> tuple[str, ...]:
    """The workspace as configured and with its own symlinks followed (`/tmp` may be a link)."""
    return tuple(dict.fromkeys((os.path.normpath(workspace), os.path.realpath(workspace))))


def os_error(error: OSError, path: str) -> AppError:
    """An OSError as the client's error: what went wrong with which path, never a 500."""
    reason = error.strerror or str(error)
    if isinstance(error, LinkOnPath):
        return ConflictError(
            f"{path} changed after it was judged: {error.part} is a symbolic link now, which "
            "the files API does not follow (docs/api.md#files); nothing was read or written, "
            "ask again"
        )
    if error.errno in (errno.ENOENT, errno.ENOTDIR):
        return NotFoundError(f"{path}: no such file or directory")
    if error.errno == errno.EISDIR:
        return ConflictError(f"{path} is a directory")
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return ForbiddenError(f"{path}: {reason} (the server's user may not do this)")
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return StorageFullError()
    if is_descriptors_exhausted(error):
        return DescriptorsExhaustedError()
    if error.errno == errno.ENAMETOOLONG:
        return InvalidRequestError(f"a part of the path is too long: {reason}")
    return ConflictError(f"{path}: {reason}")
