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

A mode change that sets the set-user-ID or set-group-ID bit (`chmod u+s`, `g+s`) answers EPERM.
Inside the sandbox a command is the server's own user, with the host's uid: a set-user-ID program
it left in the workspace would run as that user (root, for a root server) for whoever executes
it on the host, where the workspace is not mounted `nosuid` as it is in the sandbox. The mode
is a number in a register, so the filter can test it; a file created with those bits loses them
at its first write (the kernel drops them for a writer without `CAP_FSETID`), so only the
`chmod` calls need it.

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
# The calls that change a file's mode, and which of their arguments is the mode (<linux/syscalls.h>:
# chmod(path, mode), fchmod(fd, mode), fchmodat(dirfd, path, mode), fchmodat2(…, mode, flags)).
# arm64 has no plain `chmod`.
MODE_SETTERS: Final = {
    "x86_64": {"chmod": (90, 1), "fchmod": (91, 1), "fchmodat": (268, 2), "fchmodat2": (452, 2)},
    "aarch64": {"fchmod": (52, 1), "fchmodat": (53, 2), "fchmodat2": (452, 2)},
}
SET_ID_BITS: Final = 0o6000  # S_ISUID | S_ISGID
# x32 system calls on x86-64: the native numbers with this bit set.
_X32_SYSCALL_BIT: Final = 0x40000000

# Classic BPF (<linux/filter.h>, <linux/seccomp.h>): what the filter is written in.
_LOAD_WORD: Final = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JUMP_IF_EQUAL: Final = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JUMP_IF_AT_LEAST: Final = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JUMP_IF_ANY_BIT: Final = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RETURN: Final = 0x06  # BPF_RET | BPF_K
_ALLOW: Final = 0x7FFF0000  # SECCOMP_RET_ALLOW
_NOT_THERE: Final = 0x00050000 | errno.ENOSYS  # SECCOMP_RET_ERRNO
_REFUSED: Final = 0x00050000 | errno.EPERM
# Offsets in `struct seccomp_data`: the number, the arch word, then six 64-bit arguments, whose
# low word comes first on these little-endian machines (a mode is 32 bits wide).
_NUMBER: Final = 0
_ARCH: Final = 4
_ARGUMENTS: Final = 16

# An instruction whose jumps name the instructions they go to, resolved by `_assemble`.
_Step = tuple[int, str | None, str | None, int]
_NEXT = None


def _argument(index: int) -> int:
    return _ARGUMENTS + 8 * index


def _assemble(steps: list[tuple[str | None, _Step]]) -> bytes:
    """The program as `struct sock_filter`s: each step may carry a label, and a jump names the
    label it goes to (or `_NEXT`); classic BPF counts the instructions skipped, forward only."""
    at = {label: index for index, (label, _) in enumerate(steps) if label is not None}
    program = []
    for index, (_, (code, if_true, if_false, value)) in enumerate(steps):
        skips = [0 if target is _NEXT else at[target] - index - 1 for target in (if_true, if_false)]
        assert all(0 <= skip <= 255 for skip in skips), (index, skips)
        program.append(struct.pack("=HBBI", code, *skips, value))
    return b"".join(program)


def build_program(machine: str) -> bytes | None:
    """The filter for `machine` (`platform.machine()`), None when there is no table for it."""
    if machine not in AUDIT_ARCH:
        return None
    steps: list[tuple[str | None, _Step]] = [
        (None, (_LOAD_WORD, _NEXT, _NEXT, _ARCH)),
        (None, (_JUMP_IF_EQUAL, _NEXT, "not there", AUDIT_ARCH[machine])),  # another ABI
        (None, (_LOAD_WORD, _NEXT, _NEXT, _NUMBER)),
    ]
    if machine == "x86_64":
        steps.append((None, (_JUMP_IF_AT_LEAST, "not there", _NEXT, _X32_SYSCALL_BIT)))
    steps += [
        (None, (_JUMP_IF_EQUAL, "not there", _NEXT, number))
        for number in sorted(DENIED[machine].values())
    ]
    setters = sorted(MODE_SETTERS[machine].values())
    steps += [(None, (_JUMP_IF_EQUAL, f"mode {index}", _NEXT, number)) for number, index in setters]
    # Classic BPF jumps forward only: the mode checks sit between two ALLOWs, before the
    # returns they go to.
    steps.append((None, (_RETURN, _NEXT, _NEXT, _ALLOW)))
    for index in sorted({index for _, index in setters}):
        steps += [
            (f"mode {index}", (_LOAD_WORD, _NEXT, _NEXT, _argument(index))),
            (None, (_JUMP_IF_ANY_BIT, "refused", "mode allowed", SET_ID_BITS)),
        ]
    steps += [
        ("mode allowed", (_RETURN, _NEXT, _NEXT, _ALLOW)),
        ("not there", (_RETURN, _NEXT, _NEXT, _NOT_THERE)),
        ("refused", (_RETURN, _NEXT, _NEXT, _REFUSED)),
    ]
    return _assemble(steps)


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
