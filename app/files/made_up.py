"""Files the kernel makes up on read (sysfs, cgroupfs, debugfs, …): their size says nothing of
their bytes. sysfs says 4096 for every attribute and gives the few it has, so a download
announced `Content-Length: 4096`, sent those and had to cut the connection, recorded as a file
that shrank. Such a file is read whole first, into a memory file, and its size is that of the
bytes read: announced, hashed and recorded alike. (/proc is never served: app/files/paths.py.)
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from typing import Any, Final

from app.core.errors import ConflictError

# statfs(2)'s f_type of the filesystems whose content the kernel makes at each read.
MADE_UP_FILESYSTEMS: Final = frozenset(
    {
        0x62656572,  # sysfs
        0x0027E0EB,  # cgroup
        0x63677270,  # cgroup2
        0x64626720,  # debugfs
        0x74726163,  # tracefs
        0x73636673,  # securityfs
        0x62656570,  # configfs
        0xCAFE4A11,  # bpf
        0x9FA0,  # proc
    }
)
# The most such a file may hold: an attribute is a page; a binary one (firmware tables) more.
MADE_UP_MAX_BYTES: Final = 16 * 1024 * 1024
_STATFS_BUFFER_WORDS = 32  # struct statfs is 120 bytes on 64-bit Linux; f_type comes first


def _load_fstatfs() -> Callable[[int, Any], int] | None:
    try:
        function = ctypes.CDLL(None, use_errno=True).fstatfs
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_void_p]
    function.restype = ctypes.c_int
    return function


_fstatfs = _load_fstatfs()


def made_up_on_read(fd: int) -> bool:
    """Whether the open file `fd` is on a filesystem of `MADE_UP_FILESYSTEMS`."""
    if _fstatfs is None:
        return False
    buffer = (ctypes.c_long * _STATFS_BUFFER_WORDS)()
    if _fstatfs(fd, buffer) != 0:
        return False
    return (buffer[0] & 0xFFFFFFFF) in MADE_UP_FILESYSTEMS


def read_whole(fd: int, info: os.stat_result, shown: str) -> tuple[int, os.stat_result]:
    """The bytes of `fd` in a memory file (its descriptor, at offset 0) and `info` with their
    size; a ConflictError for a file that does not end within `MADE_UP_MAX_BYTES`, or that
    would block (a stream such as a trace pipe)."""
    pieces: list[bytes] = []
    size = 0
    try:
        while piece := os.read(fd, 65536):
            pieces.append(piece)
            size += len(piece)
            if size > MADE_UP_MAX_BYTES:
                raise ConflictError(
                    f"{shown} is made by the kernel as it is read and holds more than "
                    f"{MADE_UP_MAX_BYTES} bytes: it is not served"
                )
    except BlockingIOError:
        raise ConflictError(
            f"{shown} is a stream the kernel makes as it is read, with no end: it is not served"
        ) from None
    copy = os.memfd_create("shellgate-read", os.MFD_CLOEXEC)
    try:
        view = memoryview(b"".join(pieces))
        while view:
            view = view[os.write(copy, view) :]
        os.lseek(copy, 0, os.SEEK_SET)
    except BaseException:
        os.close(copy)
        raise
    return copy, _with_size(info, size)


def _with_size(info: os.stat_result, size: int) -> os.stat_result:
    """`info` with its `st_size` replaced: a stat result is a struct sequence, its first ten
    fields given by position (the size the seventh), the others by name."""
    fields = list(info[:10])
    fields[_POSITIONAL.index("st_size")] = size
    named = {
        name: getattr(info, name)
        for name in dir(info)
        if name.startswith("st_") and name not in _POSITIONAL
    }
    return os.stat_result(fields, named)


# The named fields among the ten positional ones (the last three, the times in whole
# seconds, have no name of their own: `st_atime` and the others are the float ones).
_POSITIONAL: Final = ("st_mode", "st_ino", "st_dev", "st_nlink", "st_uid", "st_gid", "st_size")
