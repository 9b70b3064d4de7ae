"""Acting on a judged path without following a symbolic link on the way.

The files API judges a path with every link followed (`locate`: `realpath`), then acts on that
resolved path, which then has no link in it. Acted on as a path, the kernel would follow
whatever links are there by then: a command in the workspace (or anyone who can write a
directory on the way) can put one where a directory was, between the judgement and the
operation; a prompted operation waits minutes for a human in between. Followed by the server,
such a link leads where the command cannot go: `/proc/self` is the server (its environment
holds every token), the sandbox's hidden paths are hidden from commands only.

So each part of the resolved path is opened here on its own, relative to the part before,
with `O_NOFOLLOW`: a part that is a link by now raises `LinkOnPath` (the operation fails with
a 409, nothing read or written), never leads elsewhere. A walk instead of `openat2`'s
`RESOLVE_NO_SYMLINKS`: Python has no binding for it, and a walk works on every kernel and
under seccomp profiles that refuse the newer call.
"""

from __future__ import annotations

import errno
import os
import stat


class LinkOnPath(OSError):
    """A part of a path that had no link when it was judged is a symbolic link now."""

    def __init__(self, part: str) -> None:
        super().__init__(errno.ELOOP, "a symbolic link is on the path now", part)
        self.part = part


_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


def open_directory(path: str) -> int:
    """An `O_PATH` descriptor of the directory `path` (absolute, normalised), reached part by
    part without following a link. The caller closes it. LinkOnPath for a part that is a link;
    OSError (ENOENT, ENOTDIR, EACCES) as the kernel says for the rest."""
    if not os.path.isabs(path):
        raise ValueError(f"not an absolute path: {path}")
    fd = os.open("/", _PATH_FLAGS | os.O_DIRECTORY)
    walked = ""
    try:
        for part in path.split("/"):
            if not part:
                continue
            walked += "/" + part
            following = os.open(part, _PATH_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = following
            mode = os.fstat(fd).st_mode
            if stat.S_ISLNK(mode):
                raise LinkOnPath(walked)
            if not stat.S_ISDIR(mode):
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), walked)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_in(directory: int, name: str, flags: int, mode: int = 0o600, *, shown: str) -> int:
    """`name` in the directory `directory` (a descriptor), opened with `flags`, never through a
    link: LinkOnPath (for `shown`, its full path) if `name` is one."""
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=directory)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise LinkOnPath(shown) from None
        raise


def open_without_links(path: str, flags: int) -> int:
    """`path` (absolute, normalised, as `realpath` gave it) opened with `flags`, no part of it
    followed as a link. The caller closes it."""
    parent, name = os.path.split(path)
    directory = open_directory(parent)
    try:
        if not name:  # the root itself
            return os.open(".", flags | os.O_CLOEXEC, dir_fd=directory)
        return open_in(directory, name, flags, shown=path)
    finally:
        os.close(directory)


def stat_without_links(path: str) -> os.stat_result:
    """What `path` names, as `os.stat` would tell it, but LinkOnPath where it would have
    followed a link."""
    parent, name = os.path.split(path)
    directory = open_directory(parent)
    try:
        if not name:
            return os.fstat(directory)
        info = os.stat(name, dir_fd=directory, follow_symlinks=False)
    finally:
        os.close(directory)
    if stat.S_ISLNK(info.st_mode):
        raise LinkOnPath(path)
    return info
