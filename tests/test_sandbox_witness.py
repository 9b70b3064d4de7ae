"""The witness of a sandboxed command spawned without a standby (app/sandbox/bwrap.py,
`shell_launch`): real bash, real bwrap, a real witness channel. bwrap passes its command's end
on as an exit status; the process that becomes the command says `J` on the channel from inside
the sandbox, and the kernel hands the server a pidfd of it, where the command's own wait status
can be read (Linux 6.15+)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core.config import Settings
from app.process.exit_witness import receive_with_pidfd, wait_status, witness_channel
from app.sandbox import Sandbox, SandboxUnavailable
from app.sandbox.bwrap import shell_launch
from app.sandbox.profile import SandboxProfile
from tests.pidfd_exit import kernel_keeps_exit_status


@pytest.fixture
def profile(tmp_path: Path) -> SandboxProfile:
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, data_dir=tmp_path / "data", workspace=tmp_path
    )
    sandbox = Sandbox(settings)
    try:
        sandbox.check()
    except SandboxUnavailable as error:
        pytest.skip(str(error))
    return sandbox.default


@pytest.fixture
def channel() -> Iterator[tuple[int, int]]:
    read_end, write_end = witness_channel()
    yield read_end, write_end
    for fd in (read_end, write_end):
        with contextlib.suppress(OSError):  # closed by the test already
            os.close(fd)


def launch(
    profile: SandboxProfile, script: str, cwd: Path, witness_fd: int | None
) -> subprocess.CompletedProcess[bytes]:
    argv = shell_launch(
        "/bin/bash", profile, ["/bin/bash", "-c", script], str(cwd), witness_fd=witness_fd
    )
    return subprocess.run(
        argv,
        capture_output=True,
        timeout=60,
        pass_fds=() if witness_fd is None else (witness_fd,),
        check=False,
    )


def test_the_command_says_its_word_with_a_pidfd_that_tells_its_signal(
    profile: SandboxProfile, channel: tuple[int, int], tmp_path: Path
) -> None:
    if not kernel_keeps_exit_status():
        pytest.skip("this kernel keeps no exit status on a pidfd (before Linux 6.15)")
    read_end, write_end = channel
    ended = launch(profile, "kill -SEGV $$", tmp_path, write_end)
    assert ended.returncode == 139, ended  # bwrap's 128 + N
    word, pidfd = receive_with_pidfd(read_end, wait=False)
    assert word == b"J"
    assert pidfd is not None
    try:
        status = wait_status(pidfd)
    finally:
        os.close(pidfd)
    assert status is not None
    assert os.waitstatus_to_exitcode(status) == -11


def test_the_command_holds_no_end_of_the_channel(
    profile: SandboxProfile, channel: tuple[int, int], tmp_path: Path
) -> None:
    read_end, write_end = channel
    ended = launch(
        profile, "for fd in /proc/$$/fd/*; do readlink $fd || :; done", tmp_path, write_end
    )
    assert ended.returncode == 0, ended
    targets = ended.stdout.decode().split()
    assert len(targets) == 3, targets  # its standard streams alone
    assert not [target for target in targets if target.startswith("socket:")], targets
    assert receive_with_pidfd(read_end, wait=False)[0] == b"J"


def test_a_missing_channel_costs_the_witness_not_the_command(
    profile: SandboxProfile, channel: tuple[int, int], tmp_path: Path
) -> None:
    """A descriptor that did not reach the spawn: the command runs, with nothing added to its
    output."""
    _, write_end = channel
    os.close(write_end)  # its number is now nobody's
    ended = subprocess.run(
        shell_launch(
            "/bin/bash",
            profile,
            ["/bin/bash", "-c", "echo ran"],
            str(tmp_path),
            witness_fd=write_end,
        ),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert (ended.returncode, ended.stdout, ended.stderr) == (0, b"ran\n", b"")
