"""The sandbox's seccomp filter (app/sandbox/seccomp.py): read instruction by instruction for both
architectures it has a table for, then installed by a real bwrap on this host."""

from __future__ import annotations

import errno
import os
import platform
import struct
import subprocess

import pytest

from app.sandbox.seccomp import AUDIT_ARCH, DENIED, build_program, host_program, program_pipe

ALLOW = "allow"
NOT_THERE = "ENOSYS"
# A call the filter must leave alone on either architecture: getpid.
GETPID = {"x86_64": 39, "aarch64": 172}
X32_BIT = 0x40000000
AUDIT_ARCH_I386 = 0x40000003


def run_filter(program: bytes, arch: int, number: int) -> str:
    """What the kernel does with a call `number` made through ABI `arch`: the classic BPF the
    filter uses (loads of `seccomp_data` words, jumps on equal / at least, returns), read one
    instruction at a time."""
    instructions = [struct.unpack_from("=HBBI", program, at) for at in range(0, len(program), 8)]
    data = {0: number, 4: arch}
    accumulator, position = 0, 0
    while True:
        code, if_true, if_false, value = instructions[position]
        if code == 0x20:
            accumulator = data[value]
            position += 1
        elif code in (0x15, 0x35):
            taken = accumulator == value if code == 0x15 else accumulator >= value
            position += 1 + (if_true if taken else if_false)
        elif code == 0x06:
            if value == 0x7FFF0000:
                return ALLOW
            assert value == 0x00050000 | errno.ENOSYS, hex(value)
            return NOT_THERE
        else:
            raise AssertionError(f"an instruction the filter does not use: {code:#x}")


@pytest.mark.parametrize("machine", sorted(AUDIT_ARCH))
def test_the_filter_answers_enosys_to_the_denied_calls_alone(machine: str) -> None:
    program = build_program(machine)
    assert program is not None
    arch = AUDIT_ARCH[machine]
    for name, number in DENIED[machine].items():
        assert run_filter(program, arch, number) == NOT_THERE, name
    for number in (0, 1, GETPID[machine], 59, 200, 424, 428, 450):
        if number not in DENIED[machine].values():
            assert run_filter(program, arch, number) == ALLOW, number


@pytest.mark.parametrize("machine", sorted(AUDIT_ARCH))
def test_another_abi_gets_nothing_through(machine: str) -> None:
    """32-bit x86 (or ARM) numbers differ from the native ones: a filter in native numbers
    would let io_uring through `int 0x80`. Every call of another ABI answers ENOSYS."""
    program = build_program(machine)
    assert program is not None
    for number in (GETPID[machine], 3, 425):
        assert run_filter(program, AUDIT_ARCH_I386, number) == NOT_THERE


def test_x32_numbers_get_nothing_through() -> None:
    """x32 calls come with the x86-64 ABI's arch word and the number's bit 30 set."""
    program = build_program("x86_64")
    assert program is not None
    assert run_filter(program, AUDIT_ARCH["x86_64"], X32_BIT | 425) == NOT_THERE
    assert run_filter(program, AUDIT_ARCH["x86_64"], X32_BIT | GETPID["x86_64"]) == NOT_THERE


def test_an_architecture_without_a_table_has_no_filter() -> None:
    assert build_program("riscv64") is None


PROBE = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
for number in NUMBERS:
    ctypes.set_errno(0)
    result = libc.syscall(number, 0, 0, 0, 0, 0)
    print(result, ctypes.get_errno())
"""


def test_bwrap_installs_it_and_the_calls_answer_enosys() -> None:
    if host_program() is None:
        pytest.skip(f"no filter for {platform.machine()}")
    machine = platform.machine()
    numbers = [*DENIED[machine].values(), GETPID[machine]]
    pipe = program_pipe()
    assert pipe is not None
    try:
        ran = subprocess.run(
            [
                *("bwrap", "--unshare-user", "--unshare-pid", "--ro-bind", "/", "/"),
                *("--proc", "/proc", "--dev", "/dev", "--seccomp", str(pipe), "--"),
                *("python3", "-I", "-c", PROBE.replace("NUMBERS", repr(numbers))),
            ],
            pass_fds=(pipe,),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(pipe)
    assert ran.returncode == 0, ran.stderr
    answers = [tuple(map(int, line.split())) for line in ran.stdout.splitlines()]
    *denied, getpid = answers
    assert denied == [(-1, errno.ENOSYS)] * len(DENIED[machine])
    assert getpid[0] > 0  # its pid in the sandbox's PID namespace
