"""The sandbox's seccomp filter (app/sandbox/seccomp.py): read instruction by instruction for both
architectures it has a table for, then installed by a real bwrap on this host."""

from __future__ import annotations

import errno
import os
import platform
import stat
import struct
import subprocess
from pathlib import Path

import pytest

from app.sandbox.seccomp import (
    AUDIT_ARCH,
    DENIED,
    MODE_SETTERS,
    build_program,
    host_program,
    program_pipe,
)

ALLOW = "allow"
NOT_THERE = "ENOSYS"
REFUSED = "EPERM"
# A call the filter must leave alone on either architecture: getpid.
GETPID = {"x86_64": 39, "aarch64": 172}
X32_BIT = 0x40000000
AUDIT_ARCH_I386 = 0x40000003


def run_filter(program: bytes, arch: int, number: int, arguments: tuple[int, ...] = ()) -> str:
    """What the kernel does with a call `number` made through ABI `arch` with `arguments`: the
    classic BPF the filter uses (loads of `seccomp_data` words, jumps on equal / at least / any
    bit, returns), read one instruction at a time."""
    instructions = [struct.unpack_from("=HBBI", program, at) for at in range(0, len(program), 8)]
    data = {0: number, 4: arch}
    for index, argument in enumerate((*arguments, 0, 0, 0, 0, 0, 0)[:6]):
        # Little-endian: the argument's low word, then its high one.
        data[16 + 8 * index], data[20 + 8 * index] = argument & 0xFFFFFFFF, argument >> 32
    accumulator, position = 0, 0
    while True:
        assert position < len(instructions), "ran off the program's end"
        code, if_true, if_false, value = instructions[position]
        if code == 0x20:
            accumulator = data[value]
            position += 1
        elif code in (0x15, 0x35, 0x45):
            if code == 0x15:
                taken = accumulator == value
            elif code == 0x35:
                taken = accumulator >= value
            else:
                taken = accumulator & value != 0
            position += 1 + (if_true if taken else if_false)
        elif code == 0x06:
            answers = {
                0x7FFF0000: ALLOW,
                0x00050000 | errno.ENOSYS: NOT_THERE,
                0x00050000 | errno.EPERM: REFUSED,
            }
            assert value in answers, hex(value)
            return answers[value]
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
def test_a_mode_with_the_set_id_bits_is_refused_and_any_other_passes(machine: str) -> None:
    """chmod, fchmod, fchmodat and fchmodat2 with S_ISUID or S_ISGID in their mode argument
    answer EPERM; the same calls with any other mode (sticky bit included), and other calls
    with those bits in the same argument, pass. Only the mode's own argument counts."""
    program = build_program(machine)
    assert program is not None
    arch = AUDIT_ARCH[machine]
    for name, (number, mode_at) in MODE_SETTERS[machine].items():
        for mode in (0o4755, 0o2755, 0o6777, 0o4000, 0o104755):
            arguments = tuple(mode if at == mode_at else 3 for at in range(4))
            assert run_filter(program, arch, number, arguments) == REFUSED, (name, oct(mode))
        for mode in (0o755, 0o1777, 0o777, 0o644, 0o1000, 0):
            arguments = tuple(mode if at == mode_at else 0o6000 for at in range(4))
            assert run_filter(program, arch, number, arguments) == ALLOW, (name, oct(mode))
        # The high word of the argument is not the mode's (mode_t is 32 bits).
        high = tuple((0o6000 << 32) | 0o755 if at == mode_at else 0 for at in range(4))
        assert run_filter(program, arch, number, high) == ALLOW, name
    assert run_filter(program, arch, GETPID[machine], (0o4755, 0o4755, 0o4755)) == ALLOW


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


def python_in_bwrap(script: str, writable: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`python3 -I -c script` in a real bwrap with this host's filter, every capability
    dropped, the host read-only but `writable` (its working directory, when given)."""
    if host_program() is None:
        pytest.skip(f"no filter for {platform.machine()}")
    pipe = program_pipe()
    assert pipe is not None
    place = [] if writable is None else ["--bind", str(writable), str(writable)]
    place += [] if writable is None else ["--chdir", str(writable)]
    try:
        return subprocess.run(
            [
                *("bwrap", "--unshare-user", "--unshare-pid", "--cap-drop", "ALL"),
                *("--ro-bind", "/", "/", *place, "--proc", "/proc", "--dev", "/dev"),
                *("--seccomp", str(pipe), "--", "python3", "-I", "-c", script),
            ],
            pass_fds=(pipe,),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(pipe)


def test_bwrap_installs_it_and_the_calls_answer_enosys() -> None:
    machine = platform.machine()
    numbers = [*DENIED.get(machine, {}).values(), GETPID.get(machine, 0)]
    ran = python_in_bwrap(PROBE.replace("NUMBERS", repr(numbers)))
    assert ran.returncode == 0, ran.stderr
    answers = [tuple(map(int, line.split())) for line in ran.stdout.splitlines()]
    *denied, getpid = answers
    assert denied == [(-1, errno.ENOSYS)] * len(DENIED[machine])
    assert getpid[0] > 0  # its pid in the sandbox's PID namespace


SET_ID_ATTEMPTS = """
import os, shutil, stat, subprocess
shutil.copy("/bin/true", "chmodded")
for mode in (0o4755, 0o2755):
    try:
        os.chmod("chmodded", mode)
        print("chmod", oct(mode), "passed")
    except PermissionError:
        print("chmod", oct(mode), "EPERM")
os.chmod("chmodded", 0o1755)  # any other bit still changes
print("chmod(1)", subprocess.run(["chmod", "u+s", "chmodded"]).returncode)
# Made with the bits, a file loses them at its first write (no CAP_FSETID in the sandbox).
made = os.open("made", os.O_CREAT | os.O_WRONLY, 0o6755)
os.write(made, open("/bin/true", "rb").read())
os.close(made)
"""


def test_bwrap_installs_it_and_no_command_leaves_a_set_id_program(tmp_path: Path) -> None:
    """A set-user-ID program a command left in a writable tree would run as the server's user
    for whoever executes it on the host; in the sandbox every way to make one fails."""
    ran = python_in_bwrap(SET_ID_ATTEMPTS, writable=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == ["chmod 0o4755 EPERM", "chmod 0o2755 EPERM", "chmod(1) 1"]
    assert "Operation not permitted" in ran.stderr  # chmod(1) says why
    for name in ("chmodded", "made"):
        mode = (tmp_path / name).stat().st_mode
        assert mode & (stat.S_ISUID | stat.S_ISGID) == 0, (name, oct(mode))
    assert (tmp_path / "chmodded").stat().st_mode & stat.S_ISVTX
