"""The system calls a sandboxed command does without: a seccomp filter bwrap installs before it
execs the command (`--seccomp FD`, docs/sandbox.md#system-calls).

Why: the sandbox's boundary is the kernel's namespaces, so a kernel bug reachable from an
unprivileged process crosses it. A few interfaces are where such bugs have kept being found, and
a shell command has no use for them: io_uring (`io_uring_setup`, `_enter`, `_register`), eBPF
(`bpf`), performance counters (`perf_event_open`), `userfaultfd` (the usual way to win an
exploit's race) and the kernel's key store (`keyctl`, `add_key`, `request_key`). They answer
ENOSYS, as on a kernel built without them, which is what programs that use them when present
(libuv's io_uring, a Kerberos cache) already fall back from.

A system call made through another ABI than the host's own (32-bit x86 through `int 0x80`,
x32's numbers on x86-64, 32-bit ARM on arm64) would pass a filter written in the native numbers,
so every one answers ENOSYS: 32-bit programs do not run in the sandbox.

On an architecture without a table here (neither x86-64 nor arm64) there is no filter: the
sandbox is the namespaces alone, and `GET /v1/info` does not list `seccomp`.
"""

from __future__ import annotations

import errno
import functools
import os
import platform
import struct
from typing import Final

# <linux/audit.h>: the `arch` word of `struct seccomp_data` for the host's own ABI.
AUDIT_ARCH: Final = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# The syscall numbers, from <asm/unistd_64.h> (x86-64) and <asm-generic/unistd.h> (arm64).
DENIED: Final = {
    "x86_64": {
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "bpf": 321,
        "perf_event_open": 298,
        "userfaultfd": 323,
        "keyctl": 250,
        "add_key": 248,
        "request_key": 249,
    },
    "aarch64": {
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "bpf": 280,
        "perf_event_open": 241,
        "userfaultfd": 282,
        "keyctl": 219,
        "add_key": 217,
        "request_key": 218,
    },
}
# x32 system calls on x86-64: the native numbers with this bit set.
_X32_SYSCALL_BIT: Final = 0x40000000

# Classic BPF (<linux/filter.h>, <linux/seccomp.h>): what the filter is written in.
_LOAD_WORD: Final = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JUMP_IF_EQUAL: Final = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JUMP_IF_AT_LEAST: Final = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_RETURN: Final = 0x06  # BPF_RET | BPF_K
_ALLOW: Final = 0x7FFF0000  # SECCOMP_RET_ALLOW
_NOT_THERE: Final = 0x00050000 | errno.ENOSYS  # SECCOMP_RET_ERRNO
# Offsets in `struct seccomp_data`.
_NUMBER: Final = 0
_ARCH: Final = 4


def _instruction(code: int, if_true: int, if_false: int, value: int) -> bytes:
    """One `struct sock_filter`: the jumps count the instructions skipped after this one."""
    return struct.pack("=HBBI", code, if_true, if_false, value)


def build_program(machine: str) -> bytes | None:
    """The filter for `machine` (`platform.machine()`), None when there is no table for it."""
    if machine not in AUDIT_ARCH:
        return None
    denied = sorted(DENIED[machine].values())
    count = len(denied)
    # The number's checks come last before ALLOW and NOT_THERE: each jumps to NOT_THERE by
    # skipping the checks after it and ALLOW.
    number_checks = [
        _instruction(_JUMP_IF_EQUAL, count - index, 0, number)
        for index, number in enumerate(denied)
    ]
    if machine == "x86_64":
        number_checks.insert(0, _instruction(_JUMP_IF_AT_LEAST, count + 1, 0, _X32_SYSCALL_BIT))
    return b"".join(
        [
            _instruction(_LOAD_WORD, 0, 0, _ARCH),
            # Another ABI: past the number's load, its checks and ALLOW.
            _instruction(_JUMP_IF_EQUAL, 0, 1 + len(number_checks) + 1, AUDIT_ARCH[machine]),
            _instruction(_LOAD_WORD, 0, 0, _NUMBER),
            *number_checks,
            _instruction(_RETURN, 0, 0, _ALLOW),
            _instruction(_RETURN, 0, 0, _NOT_THERE),
        ]
    )


@functools.cache
def host_program() -> bytes | None:
    """This host's filter (once per process)."""
    return build_program(platform.machine())


def program_pipe() -> int | None:
    """The reading end of a pipe that holds the filter (close-on-exec; bwrap reads it to its
    end, so each spawn needs one of its own), the caller's to pass on and close; None when
    this host has no filter. The program is a few hundred bytes: it fits the pipe."""
    program = host_program()
    if program is None:
        return None
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    try:
        os.write(write_end, program)
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    return read_end
