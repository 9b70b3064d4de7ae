"""The C library's reserved signals (32 and 33 on Linux) set back to their default when the
server inherited them ignored, so that no command starts with them ignored.

Ignored signals survive fork and exec, and nothing on a command's way can undo these two:
glibc keeps them for its threads (pthread_cancel, setxid) and its `sigaction` refuses them, so
`env --default-signal`, bash's `trap -` and Python's `signal.signal` all leave them as they
were. Found in CI, whose runner hands its children signal 32 ignored: every command then
started with it ignored (tests/api/test_sandbox_kernel.py). Only the kernel's own call reaches
them, and the server is the one process every command descends from, so it makes that call
once, at start. Setting them to the default is safe for the server itself: glibc installs its
handler before it first uses either, and nothing else sends them.
"""

from __future__ import annotations

import ctypes
import logging
import platform
from pathlib import Path
from typing import Final

logger = logging.getLogger("shellgate.process")

RESERVED: Final = (32, 33)
# The number of `rt_sigaction` per architecture (the kernel's syscall tables).
_RT_SIGACTION: Final = {"x86_64": 13, "aarch64": 134}
# The kernel's `struct sigaction` begins with the handler; SIG_DFL is 0, so an all-zero
# structure (handler, flags, restorer, mask) is "default, no flags" on either architecture.
_KERNEL_SIGACTION_WORDS: Final = 4
_SIGSET_BYTES: Final = 8


def ignored_signals(status: Path = Path("/proc/self/status")) -> set[int]:
    """The signals this process ignores (the `SigIgn` mask of its status)."""
    for line in status.read_text().splitlines():
        if line.startswith("SigIgn:"):
            mask = int(line.split()[1], 16)
            return {number for number in range(1, 65) if mask & (1 << (number - 1))}
    return set()


def restore_reserved_signals() -> list[int]:
    """Set each reserved signal this process ignores back to its default; the ones that were.
    A no-op (and an empty list) where none is ignored, the usual case."""
    try:
        ignored = sorted(ignored_signals() & set(RESERVED))
    except OSError:
        return []
    if not ignored:
        return []
    number = _RT_SIGACTION.get(platform.machine())
    if number is None:
        logger.warning(
            "signals %s are ignored and cannot be reset on %s: commands inherit them ignored",
            ignored,
            platform.machine(),
        )
        return []
    libc = ctypes.CDLL(None, use_errno=True)
    default = (ctypes.c_ulong * _KERNEL_SIGACTION_WORDS)()
    restored = []
    for signal_number in ignored:
        if libc.syscall(number, signal_number, ctypes.byref(default), None, _SIGSET_BYTES) == 0:
            restored.append(signal_number)
        else:
            logger.warning(
                "signal %d could not be reset (errno %d): commands inherit it ignored",
                signal_number,
                ctypes.get_errno(),
            )
    if restored:
        logger.info("signals %s were inherited ignored: set back to their default", restored)
    return restored
