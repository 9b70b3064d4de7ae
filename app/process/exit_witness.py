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
"""

from __future__ import annotations

import ctypes
import struct
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
