"""The shell started ahead (app/process/standby.py) runs its command as strictly as `Popen`:
the exact argv, environment and directory, stdin from /dev/null, default SIGPIPE, its own
session, and a refused directory is an `OSError` before anything runs. No cgroups here (the
API tests cover the join): the standby is given none to enter."""

from __future__ import annotations

import logging
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app.confinement import Limits, Unit
from app.confinement.cgroups import CgroupBackend
from app.confinement.standby import SpawnAhead
from app.core.config import Settings
from app.process import StandbyGone, StandbyShell, ulimit_steps
from app.process.exit_witness import wait_status
from app.process.helper_children import process_stopped
from app.process.posix_shell import POSIX_SHELL
from app.process.signal_defaults import WRAPPER_IGNORED
from app.process.standby import SANDBOX_ENTRY_SCRIPT, STANDBY_SCRIPT
from app.sandbox import Sandbox
from tests.pidfd_exit import kernel_keeps_exit_status
from tests.waiting import eventually


@pytest.fixture
def standby(tmp_path: Path) -> Iterator[StandbyShell]:
    shell = StandbyShell("/bin/bash", ())
    try:
        yield shell
    finally:
        shell.dismiss()


def finish(shell: StandbyShell) -> tuple[int, bytes, bytes]:
    assert shell.popen.stdout is not None and shell.popen.stderr is not None
    out, err = shell.popen.stdout.read(), shell.popen.stderr.read()
    return shell.popen.wait(), out, err


def test_the_command_gets_exactly_its_argv_environment_and_directory(
    standby: StandbyShell, tmp_path: Path
) -> None:
    env = {"ONLY": "this", "SPACED": "a b\tc", "EMPTY": "", "NEWLINE": "x\ny"}
    argv = ["/usr/bin/env", "-0"]
    standby.claim(argv, str(tmp_path), env, ":")
    code, out, _ = finish(standby)
    assert code == 0
    assert sorted(out.split(b"\0")[:-1]) == sorted(f"{k}={v}".encode() for k, v in env.items())


def test_argv_words_are_passed_untouched(standby: StandbyShell, tmp_path: Path) -> None:
    words = ["-n", "two  spaces", "$HOME", "*", "a=b", ""]
    standby.claim(["/bin/bash", "-c", 'printf "%s|" "$@"', "name", *words], "/", {}, ":")
    code, out, _ = finish(standby)
    assert (code, out) == (0, "|".join(words).encode() + b"|")


def test_directory_stdin_signals_and_session_are_those_of_a_spawn(
    standby: StandbyShell, tmp_path: Path
) -> None:
    script = (
        'pwd; read -r line; echo "read=$?"; yes | head -n 1; '
        'echo "pgid=$(ps -o pgid= $$ | tr -d " ") sid=$(ps -o sid= $$ | tr -d " ") pid=$$"'
    )
    standby.claim(["/bin/bash", "-c", script], str(tmp_path), {"PATH": os.defpath}, ":")
    code, out, err = finish(standby)
    lines = out.decode().splitlines()
    assert code == 0, err
    assert lines[0] == str(tmp_path)
    assert lines[1] == "read=1"  # stdin is /dev/null: EOF at once
    assert lines[2] == "y"  # `yes` ends on SIGPIPE quietly: not ignored
    assert err == b""
    pid = standby.pid
    assert lines[3] == f"pgid={pid} sid={pid} pid={pid}"


def test_limits_are_set_before_the_command(standby: StandbyShell) -> None:
    steps = ulimit_steps(((resource.RLIMIT_NOFILE, 123, 456),))
    assert steps is not None
    standby.claim(["/bin/bash", "-c", "ulimit -Sn; ulimit -Hn"], "/", {}, steps)
    code, out, _ = finish(standby)
    assert (code, out) == (0, b"123\n456\n")


def test_a_missing_directory_is_an_oserror_and_nothing_runs(
    standby: StandbyShell, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(FileNotFoundError):
        standby.claim(["/bin/bash", "-c", f"touch {marker}"], "/nonexistent-x", {}, ":")
    assert standby.popen.poll() is not None  # ended, and reaped
    assert not marker.exists()


def test_a_spec_the_shell_cannot_read_is_reported_not_run(tmp_path: Path) -> None:
    """The script's side of `StandbyGone` for an unreadable spec: it says `spec` on the status
    pipe and exits before running anything, so the server spawns the usual way instead of
    recording an exit status for a command that never ran."""
    marker = tmp_path / "ran"
    spec = os.memfd_create("spec")
    os.write(spec, b"/\0:\0not-a-count\0/bin/bash\0-c\0" + f"touch {marker}".encode() + b"\0")
    status_read, status_write = os.pipe()
    script = subprocess.Popen(
        [
            "/bin/bash",
            "--noprofile",
            "--norc",
            str(STANDBY_SCRIPT),
            str(status_write),
            "keep",
            str(spec),
        ],
        stdin=subprocess.PIPE,
        pass_fds=(status_write, spec),
    )
    os.close(status_write)
    os.close(spec)
    assert script.stdin is not None
    script.stdin.write(b"\n")
    script.stdin.close()
    assert script.wait(timeout=10) == 126
    with os.fdopen(status_read, "rb") as status:
        assert status.read().split() == [b"J", b"spec"]
    assert not marker.exists()


def test_the_command_inherits_no_descriptor_of_the_standby(
    standby: StandbyShell, tmp_path: Path
) -> None:
    """Neither the spec's memory file nor the status pipe reaches the command: 0, 1, 2 only."""
    standby.claim(["/bin/bash", "-c", "ls /proc/self/fd"], "/", {"PATH": os.defpath}, ":")
    code, out, err = finish(standby)
    assert code == 0, err
    # `ls` itself holds one more: the directory it lists.
    assert len(out.split()) == 4, out


def test_no_spec_file_is_left_in_the_data_directory(tmp_path: Path) -> None:
    """The spec, which holds the command's environment, never touches a disk (and no inode is
    made and freed per command)."""
    ahead = SpawnAhead(
        CgroupBackend(root=True, bases={}, version=1), Limits(), "/bin/bash", tmp_path
    )
    (tmp_path / "standby").mkdir()
    (tmp_path / "standby" / "123.spec").write_text("SECRET=left by an older version")
    ahead.start()
    try:
        eventually(lambda: not (tmp_path / "standby").exists(), what="the legacy spec directory")
    finally:
        ahead.stop()
    assert list(tmp_path.iterdir()) == []


def test_a_standby_that_ended_before_its_claim_is_gone(
    standby: StandbyShell, tmp_path: Path
) -> None:
    os.kill(standby.pid, signal.SIGKILL)
    standby.popen.wait()
    with pytest.raises(StandbyGone):
        standby.claim(["/bin/true"], "/", {}, ":")


def test_a_dismissed_standby_is_reaped_with_its_pipes_closed(tmp_path: Path) -> None:
    shell = StandbyShell("/bin/bash", ())
    pid = shell.pid
    shell.dismiss()
    assert shell.popen.returncode == 0
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # no zombie left to reap
    assert shell.popen.stdout is not None and shell.popen.stdout.closed


@pytest.mark.parametrize("sandboxed", [False, True], ids=["plain", "sandboxed"])
def test_joining_a_cgroup_that_cannot_be_joined_ends_the_standby(
    tmp_path: Path, sandboxed: bool
) -> None:
    """Sandboxed, the first stage (POSIX sh) joins the cgroups: a failure ends it with 126
    before bwrap runs, as the plain standby's bash does."""
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, data_dir=tmp_path / "data", workspace=tmp_path
    )
    prefix = Sandbox(settings).standby_prefix() if sandboxed else None
    cgroup_procs = str(tmp_path / "no-such-cgroup" / "cgroup.procs")
    shell = StandbyShell("/bin/bash", (cgroup_procs,), sandbox=prefix)
    try:
        assert shell.popen.wait(timeout=10) == 126
        assert shell.popen.stderr is not None
        assert cgroup_procs.encode() in shell.popen.stderr.read()
        with pytest.raises(StandbyGone):
            shell.claim(["/bin/true"], "/", {}, ":")
    finally:
        shell.dismiss()


class CountingBackend(CgroupBackend):
    """A real cgroup-v1 backend whose base does not exist: every unit fails to open."""

    def __init__(self) -> None:
        super().__init__(root=True, bases={"pids": Path("/nonexistent-x/base")}, version=1)
        self.attempts = 0

    def open_unit(self, execution_id: str, limits: Limits) -> Unit:
        self.attempts += 1
        return super().open_unit(execution_id, limits)


def _waiting_for_a_release(ahead: SpawnAhead) -> bool:
    """Whether the spawn-ahead thread is parked in its condition's wait."""
    assert ahead._thread is not None and ahead._thread.ident is not None
    frame = sys._current_frames().get(ahead._thread.ident)
    while frame is not None:
        if frame.f_code is threading.Condition.wait.__code__:
            return True
        frame = frame.f_back
    return False


def test_a_standby_that_cannot_be_made_is_tried_once_per_release_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    backend = CountingBackend()
    ahead = SpawnAhead(backend, Limits(), "/bin/bash", tmp_path)
    ahead.start()
    try:
        eventually(lambda: backend.attempts == 1, what="the first attempt")
        # Parked until the next release: a retry loop of its own would never get there.
        eventually(lambda: _waiting_for_a_release(ahead), what="the wait for a release")
        assert backend.attempts == 1
        for expected in (2, 3):
            ahead.unit_closed()
            eventually(lambda n=expected: backend.attempts == n, what=f"attempt {expected}")
        assert ahead.take("ex_x", Limits()) is None  # the usual spawn
    finally:
        ahead.stop()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, errors


def test_a_standby_stopped_before_its_claim_is_gone_at_once_and_never_runs_it(
    tmp_path: Path,
) -> None:
    """Before, a claim on a SIGSTOPped standby waited for its exec for good: the execution
    never started and its call never answered."""
    shell = StandbyShell("/bin/bash", ())
    marker = tmp_path / "ran"
    try:
        os.kill(shell.pid, signal.SIGSTOP)  # this test's own shell
        eventually(lambda: process_stopped(shell.pid), what="the stop")  # (delivered async)
        assert not shell.alive()  # the spawn-ahead hands it to nobody
        outcome: list[BaseException | None] = []

        def claim() -> None:
            try:
                shell.claim(["/usr/bin/touch", str(marker)], "/", {}, ":")
                outcome.append(None)
            except BaseException as error:
                outcome.append(error)

        claiming = threading.Thread(target=claim, daemon=True)
        claiming.start()
        claiming.join(5)
        try:
            assert outcome and isinstance(outcome[0], StandbyGone)
        finally:
            os.kill(shell.pid, signal.SIGCONT)
        started = time.monotonic()
        shell.dismiss()
        # Protocol, not speed: a given-up standby is killed, not waited for (that was for good).
        assert time.monotonic() - started < 2
        # Reaped: the shell, which would have become the command by exec, can no longer run it.
        assert shell.popen.returncode is not None
        assert not marker.exists(), "resumed, the given-up standby must not run the command"
    finally:
        if shell.popen.poll() is None:  # a failure above must not leave it stopped
            shell.popen.kill()
            shell.popen.wait()


def test_a_standby_that_dies_before_its_exec_is_gone_not_a_command_killed(
    standby: StandbyShell, tmp_path: Path
) -> None:
    """Killed after it took its spec and before its exec (here by its own limits step), the
    shell closed its status pipe as an exec does: before, the claim returned, and the command
    read as run and killed by signal 9 though it never started."""
    marker = tmp_path / "ran"
    with pytest.raises(StandbyGone):
        standby.claim(["/usr/bin/touch", str(marker)], "/", {}, "builtin kill -KILL $$")
    assert standby.popen.returncode == -signal.SIGKILL  # reaped
    assert not marker.exists()


def signals_ignored(pid: int) -> set[str]:
    with open(f"/proc/{pid}/status") as status:
        mask = next(int(line.split()[1], 16) for line in status if line.startswith("SigIgn:"))
    return {signal.Signals(n).name.removeprefix("SIG") for n in range(1, 65) if mask >> (n - 1) & 1}


def test_a_sandboxed_standby_execs_bwrap_itself_with_bwraps_signals_ignored(
    tmp_path: Path,
) -> None:
    """The standby's first stage ignores bwrap's terminating signals with its own `trap ''` and
    execs bwrap: no `env --ignore-signal` program started per standby (bench/PROFILE.md), and bwrap
    still outlives a TERM to the group, its command starting with none ignored."""
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, data_dir=tmp_path / "data", workspace=tmp_path
    )
    prefix = Sandbox(settings).standby_prefix()
    assert prefix is not None
    assert prefix[0] == settings.sandbox_bwrap  # bwrap itself, nothing exec'd before it
    shell = StandbyShell("/bin/bash", (), sandbox=prefix)
    # The first stage is POSIX sh, cheaper to start than bash (bench/PROFILE.md).
    assert shell.popen.args[:2] == [POSIX_SHELL, str(SANDBOX_ENTRY_SCRIPT)]  # type: ignore[index]
    try:
        # The standby's own process is bwrap once it said `J` (its sandbox is built).
        exe = eventually(
            lambda: (
                name if (name := os.readlink(f"/proc/{shell.pid}/exe")).endswith("bwrap") else None
            ),
            what="the standby exec'd into bwrap",
            within=15,
        )
        assert exe == os.path.realpath(settings.sandbox_bwrap)
        assert set(WRAPPER_IGNORED) <= signals_ignored(shell.pid)
        os.killpg(shell.pid, signal.SIGTERM)  # ignored by bwrap and the waiting shell
        shell.claim(["/bin/grep", "SigIgn", "/proc/self/status"], str(tmp_path), {}, ":")
        code, out, err = finish(shell)
    finally:
        shell.dismiss()
    assert (code, out.split(), err) == (0, [b"SigIgn:", b"0000000000000000"], b"")


@pytest.mark.parametrize(
    ("command", "bwraps_status", "the_commands"),
    [("kill -SEGV $$", 139, -signal.SIGSEGV), ("exit 139", 139, 139), ("echo hi", 0, 0)],
)
def test_a_sandboxed_standby_witnesses_how_its_command_really_ended(
    tmp_path: Path, command: str, bwraps_status: int, the_commands: int
) -> None:
    """bwrap passes its command's end on as an exit status; the witness (a pidfd of the
    shell that becomes the command) says whether that was a signal."""
    if not kernel_keeps_exit_status():
        pytest.skip("this kernel keeps no exit status on a pidfd (before Linux 6.15)")
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, data_dir=tmp_path / "data", workspace=tmp_path
    )
    shell = StandbyShell("/bin/bash", (), sandbox=Sandbox(settings).standby_prefix())
    try:
        # Built: bwrap, its init and the waiting shell, each the other's only child.
        eventually(
            lambda: os.readlink(f"/proc/{shell.pid}/exe").endswith("bwrap") or None,
            what="the standby's sandbox",
            within=15,
        )
        shell.claim(["/bin/bash", "-c", command], str(tmp_path), {}, ":")
        witness = shell.take_witness()
        assert witness is not None
        code, _, _ = finish(shell)
        status = wait_status(witness)
        os.close(witness)
    finally:
        shell.dismiss()
    assert code == bwraps_status
    assert status is not None and os.waitstatus_to_exitcode(status) == the_commands


def test_a_standby_is_taken_only_while_its_sandboxs_key_holds(tmp_path: Path) -> None:
    """A standby keeps the key of the sandbox it was built in (`Sandbox.standby_key`); a spawn
    takes it only when the key is the same now, works the key out only when a standby is
    ready, and a standby with another key is discarded and replaced by one built now."""
    built = ["before"]
    ahead = SpawnAhead(
        CgroupBackend(root=True, bases={}, version=1),
        Limits(),
        "/bin/bash",
        tmp_path,
        sandbox=lambda: (built[0], None, ()),
        count=1,
    )
    asked: list[str] = []

    def key(now: str) -> Callable[[], str]:
        return lambda: asked.append(now) or now

    def ready() -> bool:
        return bool(ahead._ready) and _waiting_for_a_release(ahead)

    ahead.start()
    try:
        eventually(ready, what="a standby")
        taken = ahead.take("ex_same", Limits(), key("before"))
        assert taken is not None
        taken.shell.dismiss()
        taken.unit.release(kill=True)
        # None ready now: the key is not worked out at all.
        assert ahead.take("ex_none", Limits(), key("unused")) is None
        assert asked == ["before"]
        ahead.unit_closed()
        eventually(ready, what="the next standby, built under `before`")
        built[0] = "after"  # a hidden path made since: a spawn now would build another sandbox
        assert ahead.take("ex_stale", Limits(), key("after")) is None
        eventually(ready, what="its replacement, built now")
        taken = ahead.take("ex_fresh", Limits(), key("after"))
        assert taken is not None
        taken.shell.dismiss()
        taken.unit.release(kill=True)
    finally:
        ahead.stop()


def test_a_standbys_sandbox_is_reused_only_under_the_same_key(tmp_path: Path) -> None:
    """`Sandbox.standby_sandbox` reuses the argv it built last while the key holds (no
    `bwrap_prefix` per standby), and builds afresh once the key moved: a hidden path made
    since, or removed since, is covered (or not) as a spawn now would cover it."""
    secret = tmp_path / "secret"
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None,
        data_dir=tmp_path / "data",
        workspace=tmp_path,
        sandbox_hidden=[str(secret)],
    )
    sandbox = Sandbox(settings)
    first_key, first = sandbox.standby_sandbox()
    assert first is not None and str(secret) not in first
    again_key, again = sandbox.standby_sandbox()
    assert (again_key, again) == (first_key, first)
    assert again is not first  # a copy: a caller's list is its own
    secret.mkdir()
    made_key, made = sandbox.standby_sandbox()
    assert made_key != first_key
    assert made is not None and made[made.index(str(secret)) - 1] == "--tmpfs"
    secret.rmdir()
    secret.write_text("")
    file_key, covered = sandbox.standby_sandbox()
    assert file_key not in (first_key, made_key)
    assert covered is not None
    assert covered[covered.index(str(secret)) - 2 :][:2] == ["--ro-bind", "/dev/null"]
    secret.unlink()
    assert sandbox.standby_sandbox() == (first_key, first)
