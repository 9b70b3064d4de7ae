"""The blocking file work behind the files API, each call made from a worker thread: checks
before a read, the stat answer, and an upload written to a temporary file beside its target
and renamed over it only once complete (a reader never sees half a file; a failed or refused
upload leaves the old file as it was)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import stat
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import BinaryIO

from app.core.errors import ConflictError, NotFoundError
from app.files.made_up import made_up_on_read, read_whole
from app.files.no_links import (
    LinkOnPath,
    open_directory,
    open_in,
    open_without_links,
    stat_without_links,
)
from app.files.paths import Located, os_error
from app.sandbox.hidden import HiddenPaths

HASH_CHUNK_BYTES = 1024 * 1024
NEW_FILE_MODE = 0o644
TEMP_SUFFIX = ".shellgate-upload"
TEMP_NAME_ATTEMPTS = 100


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    return "other"


@dataclass(frozen=True, slots=True)
class Links:
    """A regular file with more than one hard link, as the judgement needs it."""

    count: int
    hidden: str | None  # the sandbox's hidden file it is another name of, if it is one


def links_of(info: os.stat_result, hidden: HiddenPaths) -> Links | None:
    """None for a file with one link, or for anything but a regular file (a directory's link
    count is its subdirectories; it has no other names)."""
    if not stat.S_ISREG(info.st_mode) or info.st_nlink <= 1:
        return None
    return Links(info.st_nlink, hidden.same_file(info))


def judged_links(located: Located, hidden: HiddenPaths) -> Links | None:
    """The links of what `located` leads to as it is judged (None for a path that leads
    nowhere yet: the operation itself reports that). The operation checks again on the
    descriptor it reads (`open_regular`) or on the stat it answers (`describe`)."""
    try:
        info = stat_without_links(located.resolved)
    except OSError:
        return None
    return links_of(info, hidden)


def open_regular(located: Located) -> tuple[BinaryIO, os.stat_result]:
    """The file a read will send, open, and its stat taken on that descriptor (so its link
    count is the one of the bytes sent, not of whatever the path leads to a moment later); a
    directory or a device/FIFO/socket is refused. Opened without blocking so that a FIFO
    cannot hold the worker. A file the kernel makes up on read is read first
    (app/files/made_up.py). No link on the way is followed (app/files/no_links.py). The
    caller closes the file."""
    try:
        fd = open_without_links(located.resolved, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as error:
        raise os_error(error, located.path) from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ConflictError(f"{located.path} is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise ConflictError(f"{located.path} is not a regular file")
        if made_up_on_read(fd):
            copy, info = read_whole(fd, info, located.path)
            os.close(fd)
            fd = copy
    except OSError as error:
        os.close(fd)
        raise os_error(error, located.path) from None
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb"), info


def read_at(file: BinaryIO, offset: int, limit: int) -> bytes:
    """Up to `limit` bytes from `offset` (fewer at the end of the file)."""
    return os.pread(file.fileno(), limit, offset)


def sha256_of(file: BinaryIO) -> str:
    digest = hashlib.sha256()
    while chunk := file.read(HASH_CHUNK_BYTES):
        digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class FileStat:
    path: str
    resolved_path: str
    type: str
    size: int
    mode: str
    mtime: datetime
    symlink: bool
    sha256: str | None
    links: Links | None  # of what it describes: the operation judges them before answering


def describe(located: Located, *, with_sha256: bool, hidden: HiddenPaths) -> FileStat:
    """The answer is taken from one stat, or, with the hash, from the descriptor hashed: its
    `links` are those of what it describes."""
    try:
        info = stat_without_links(located.resolved)
        symlink = os.path.islink(located.path)
        kind = _kind(info.st_mode)
        digest = None
        if with_sha256 and kind == "file":
            file, info = open_regular(located)  # never open a FIFO for hashing
            with file:
                kind = _kind(info.st_mode)
                digest = sha256_of(file)
    except OSError as error:
        raise os_error(error, located.path) from None
    return FileStat(
        path=located.path,
        resolved_path=located.resolved,
        type=kind,
        size=info.st_size,
        mode=f"{stat.S_IMODE(info.st_mode):04o}",
        mtime=datetime.fromtimestamp(info.st_mtime, UTC),
        symlink=symlink,
        sha256=digest,
        links=links_of(info, hidden),
    )


class Upload:
    """One upload: `open()`, `write()` each chunk, then `commit()` or `abort()`. Everything
    after `open()` happens in the directory it opened (a descriptor, reached without following
    a link: app/files/no_links.py), so a link put on the path meanwhile leads nowhere."""

    def __init__(self, located: Located, mode: int | None) -> None:
        self._target = located.resolved
        self._shown = located.path
        self.mode = mode
        self._directory: int | None = None
        self._fd: int | None = None
        self._temp: str | None = None  # its name in the directory
        self._digest = hashlib.sha256()
        self.size = 0

    def open(self) -> None:
        """Refuse a target that is a directory or not a regular file, or whose directory does
        not exist, before a byte is read; then create the temporary file beside it."""
        parent, name = os.path.split(self._target)
        try:
            self._directory = open_directory(parent)
        except FileNotFoundError:
            raise NotFoundError(f"the directory of {self._shown} does not exist") from None
        except OSError as error:
            raise os_error(error, self._shown) from None
        try:
            existing: os.stat_result | None = os.stat(
                name, dir_fd=self._directory, follow_symlinks=False
            )
        except FileNotFoundError:
            existing = None
        except OSError as error:
            raise os_error(error, self._shown) from None
        if existing is not None and stat.S_ISDIR(existing.st_mode):
            raise ConflictError(f"{self._shown} is a directory")
        if existing is not None and stat.S_ISLNK(existing.st_mode):
            raise os_error(LinkOnPath(self._target), self._shown)
        if existing is not None and not stat.S_ISREG(existing.st_mode):
            raise ConflictError(f"{self._shown} is not a regular file")
        if self.mode is None and existing is not None and existing.st_nlink == 1:
            # Less setuid and setgid, as a command's write would leave it (the kernel clears
            # them): new content never runs as the old file's owner or group. A file with other
            # hard links is not copied from: its mode is another name's (one the caller may
            # not be let read), and the upload replaces only this name.
            self.mode = stat.S_IMODE(existing.st_mode) & ~(stat.S_ISUID | stat.S_ISGID)
        elif self.mode is None:
            self.mode = NEW_FILE_MODE
        self._fd, self._temp = self._create_temporary(name)

    def _create_temporary(self, name: str) -> tuple[int, str]:
        """A new file beside the target, by a name no one else uses (as `mkstemp` makes it,
        but in the opened directory)."""
        assert self._directory is not None
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL
        for _ in range(TEMP_NAME_ATTEMPTS):
            temp = f".{name[:100]}.{secrets.token_hex(4)}{TEMP_SUFFIX}"
            try:
                return open_in(self._directory, temp, flags, 0o600, shown=self._shown), temp
            except FileExistsError:
                continue
            except OSError as error:
                raise os_error(error, self._shown) from None
        raise ConflictError(f"no free temporary name beside {self._shown}")

    def write(self, chunk: bytes) -> None:
        assert self._fd is not None
        self._digest.update(chunk)
        view = memoryview(chunk)
        try:
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
        except OSError as error:
            raise os_error(error, self._shown) from None
        self.size += len(chunk)

    def commit(self) -> str:
        """Durably in place: data synced, mode set, renamed over the target, directory synced.
        Returns the sha256 of what was written. A temporary file that someone else's file
        replaced by its name (a command in the same directory can) is not recorded as the
        upload: the rename put theirs in place, and that is a ConflictError."""
        assert self._fd is not None and self._temp is not None and self.mode is not None
        assert self._directory is not None
        name = os.path.basename(self._target)
        try:
            os.fchmod(self._fd, self.mode)
            os.fsync(self._fd)
            ours = os.fstat(self._fd)
            os.close(self._fd)
            self._fd = None
            os.replace(self._temp, name, src_dir_fd=self._directory, dst_dir_fd=self._directory)
            self._temp = None
            landed = os.stat(name, dir_fd=self._directory, follow_symlinks=False)
            if (landed.st_dev, landed.st_ino) != (ours.st_dev, ours.st_ino):
                raise ConflictError(
                    f"{self._shown}: the upload's temporary file was replaced by another while "
                    "it was written, and that other file is what now stands there; the upload "
                    "did not land"
                )
            # An O_PATH descriptor cannot be synced: the directory opened for reading, from it.
            directory = os.open(".", os.O_RDONLY | os.O_CLOEXEC, dir_fd=self._directory)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        except OSError as error:
            raise os_error(error, self._shown) from None
        finally:
            self._close_directory()
        return self._digest.hexdigest()

    def abort(self) -> None:
        """Remove the temporary file; the target stays as it was."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        if self._temp is not None and self._directory is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._temp, dir_fd=self._directory)
            self._temp = None
        self._close_directory()

    def _close_directory(self) -> None:
        if self._directory is not None:
            os.close(self._directory)
            self._directory = None
