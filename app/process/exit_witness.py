"""The exit status of a process that is not the server's child, read from a pidfd.

Why: a sandboxed command is not the server's child but bwrap's grandchild (bwrap, its init in
the sandbox's PID namespace, the command), and bwrap passes its end on as an exit status,
128 + N for a death by signal N. Waiting for bwrap alone, the record of a command that died of
SIGSEGV (or of SIGXCPU at its CPU limit) would say that it exited with 139 (or 152). Since Linux
6.15 the kernel keeps a process's wait status on its pidfd once it has exited, whoever reaps
it (`PIDFD_GET_INFO` with `PIDFD_INFO_EXIT`): a pidfd of the shell that execs the command,
which the kernel hands the server with that shell's first word (app/process/standby.py), tells
how the command really ended. On an older kernel the query says nothing and the caller keeps
bwrap's status.

The channel that word travels on is a Unix socket whose reading end asks for the sender's
pidfd with each message (`SO_PASSPIDFD`, Linux 6.5+): the kernel names the sender, so nothing
the command does can stand in for it. A standby's shell writes it once its sandbox is built; a
command spawned without a standby writes it from a stage of POSIX sh in front of it inside the
sandbox (app/sandbox/bwrap.py, `WITNESS_STAGE`), read once bwrap has ended.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import struct
import sys
from collections.abc import Callable
from typing import Any, Final

# <linux/pidfd.h>: PIDFD_GET_INFO is _IOWR(PIDFS_IOCTL_MAGIC, 11, struct pidfd_info); the kernel
# takes any size from its first version's 64 bytes on, and fills `exit_code` (offset 60) when
# `mask` says PIDFD_INFO_EXIT.
_INFO_SIZE: Final = 64
_IOC_READ_WRITE: Final = 3
PIDFD_GET_INFO: Final = (_IOC_READ_WRITE << 30) | (_INFO_SIZE << 16) | (0xFF << 8) | 11
PIDFD_INFO_EXIT: Final = 1 << 3
_EXIT_CODE_OFFSET: Final = 60
# <asm-generic/socket.h> (x86, arm, riscv; not in Python 3.11's socket module): a pidfd of
# the sender with each message on a Unix socket.
SO_PASSPIDFD: Final = 76
SCM_PIDFD: Final = 0x04
_PIDFD_BYTES: Final = 4


def _ioctl() -> Callable[[int, int, Any], int] | None:
    try:
        function: Any = ctypes.CDLL(None, use_errno=True).ioctl
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
    function.restype = ctypes.c_int
    call: Callable[[int, int, Any], int] = function
    return call


_call = _ioctl()


def wait_status(pidfd: int) -> int | None:
    """The wait status (as `waitpid` gives it) of the exited process `pidfd` refers to; None
    when it has not exited or the kernel cannot tell (before 6.15)."""
    if _call is None:
        return None
    info = ctypes.create_string_buffer(_INFO_SIZE)
    struct.pack_into("=Q", info, 0, PIDFD_INFO_EXIT)
    if _call(pidfd, PIDFD_GET_INFO, info) != 0:
        return None
    (mask,) = struct.unpack_from("=Q", info, 0)
    if not mask & PIDFD_INFO_EXIT:
        return None
    (status,) = struct.unpack_from("=i", info, _EXIT_CODE_OFFSET)
    return int(status)


def witness_channel() -> tuple[int, int]:
    """A channel's two ends (read, write), close-on-exec: a socket pair whose reading end gets,
    with each message, a pidfd of the process that sent it (none before Linux 6.5)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with contextlib.suppress(OSError):
        ours.setsockopt(socket.SOL_SOCKET, SO_PASSPIDFD, 1)
    return ours.detach(), theirs.detach()


def receive_with_pidfd(channel: int, *, wait: bool = True) -> tuple[bytes, int | None]:
    """One byte from `channel` (empty at its end) and the pidfd of the process that sent it,
    now the caller's to close (None when the kernel attached none). Without `wait`, nothing
    there yet reads as `(b"", None)`, as does a channel that fails: no witness, never an
    error (the caller keeps the status it has, or spawns without the standby)."""
    endpoint = socket.socket(fileno=channel)
    try:
        data, ancillary, _, _ = endpoint.recvmsg(
            1,
            socket.CMSG_SPACE(_PIDFD_BYTES),
            socket.MSG_CMSG_CLOEXEC | (0 if wait else socket.MSG_DONTWAIT),
        )
    except OSError:  # BlockingIOError included
        return b"", None
    finally:
        endpoint.detach()  # the descriptor stays the caller's
    pidfd: int | None = None
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == SCM_PIDFD and len(payload) >= _PIDFD_BYTES:
            received = int.from_bytes(payload[:_PIDFD_BYTES], sys.byteorder, signed=True)
            if pidfd is None:
                pidfd = received
            else:
                os.close(received)
    return data, pidfd
