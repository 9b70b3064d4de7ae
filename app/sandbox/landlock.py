"""Which Landlock ABI the kernel offers (reported by `GET /v1/info`; the sandbox itself is
built from namespaces by bubblewrap, docs/sandbox.md)."""

from __future__ import annotations

import ctypes
import functools
import platform

# landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) answers the ABI version.
_SYSCALL_NUMBERS = {"x86_64": 444, "aarch64": 444}
_CREATE_RULESET_VERSION = 1


@functools.cache
def landlock_abi() -> int | None:
    """The ABI version, or None where the kernel has no Landlock (or it is disabled)."""
    number = _SYSCALL_NUMBERS.get(platform.machine())
    if number is None:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    answer = libc.syscall(number, None, 0, _CREATE_RULESET_VERSION)
    return int(answer) if answer > 0 else None
