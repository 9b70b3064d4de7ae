"""A shell started ahead of its command: the next execution's process, already inside its
cgroups, waiting to exec the command it is given (`app/process/standby.sh`).

Why: moving a process into a cgroup (a write to `cgroup.procs`, v1 or v2) takes the kernel's
`cgroup_threadgroup_rwsem` for writing, and when no cgroup move happened in the last few
milliseconds that waits for an RCU grace period. Measured on the 2-core VM (cgroup v1): a spawn
that joins its cgroups took 1.3 ms back to back but 7-14 ms when the calls were 20-500 ms apart
(an agent's pace), where a plain spawn took 2.2 ms; with `rcu_expedited` set the difference went
away, which is how the cause was confirmed. A standby pays that wait while nobody waits for it;
a forked or exec'd process stays in its parent's cgroups for free.

The claim is as strict as `Popen`: the command's argv, environment (exactly: `env -i`), working
directory and resource limits, stdin from /dev/null, its own session and process group (the
standby's), and a failure to enter the directory or to set the limits is an `OSError` before
anything runs, not an exit status.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import select
import subprocess
from pathlib import Path

from app.process.exit_witness import receive_with_pidfd, witness_channel
from app.process.helper_children import process_stopped
from app.process.posix_shell import POSIX_SHELL
from app.process.priority import lower_priority
from app.process.signal_defaults import ENV_PROGRAM, WRAPPER_IGNORED, env_resets_signals

__all__ = ["ENV_PROGRAM", "MEMORY_FILES", "STANDBY_SCRIPT", "StandbyGone", "StandbyShell"]

# standby.sh execs the command with ENV_PROGRAM (`env -i`: the exact environment, nothing of
# bash's).
STANDBY_SCRIPT = Path(__file__).parent / "standby.sh"
# A sandboxed standby's first stage, in POSIX sh (it joins the cgroups and enters the sandbox).
SANDBOX_ENTRY_SCRIPT = Path(__file__).parent / "standby_enter.sh"
_FAILED_STEPS = {b"cwd": errno.ENOENT, b"limits": errno.EPERM}
# How often a claim waiting for the shell's exec looks whether the shell was stopped.
_STOPPED_CHECK_MS = 100
# Memory files each standby holds for its command, should the caller hand it any: a command
# that must read and write files of the server's (a session's state) gets them this way, since
# a standby's sandbox was built before anyone knew which files those would be. Empty, they
# cost no memory; a command not handed them never sees them (closed before its exec).
MEMORY_FILES = 4


def _pwrite_all(fd: int, data: bytes) -> None:
    view, position = memoryview(data), 0
    while view[position:]:
        position += os.pwrite(fd, view[position:], position)


def _status_channel(*, witnessed: bool) -> tuple[int, int]:
    """The status channel's two ends (read, write), close-on-exec. `witnessed`: one that hands
    over a pidfd of the sender with each message (app/process/exit_witness.py); otherwise a
    pipe."""
    return witness_channel() if witnessed else os.pipe2(os.O_CLOEXEC)


@functools.cache
def _standby_text() -> str:
    return STANDBY_SCRIPT.read_text()


class StandbyGone(Exception):
    """The standby ended before it could take its command (it never joined its cgroups, or was
    killed): spawn the usual way instead."""


class StandbyShell:
    """One waiting shell. `claim` hands it its command and returns its `Popen` (stdout and
    stderr are pipes, as `RunningProcess` reads them)."""

    def __init__(
        self,
        shell: str,
        cgroup_procs: tuple[str, ...],
        nice: int = 0,
        sandbox: list[str] | None = None,
        pass_fds: tuple[int, ...] = (),
    ) -> None:
        """`sandbox`: the argv prefix of the sandbox the shell waits in (app/sandbox/, bwrap's
        own, ending with its `--`), entered by `standby_enter.sh` in POSIX sh: it joins the
        cgroups and execs the sandbox with WRAPPER_IGNORED ignored (its own `trap ''`: no `env
        --ignore-signal` exec per standby); the command then starts with every signal at its
        default whatever `env_resets_signals` says. `pass_fds`: descriptors the sandbox's argv
        names (its seccomp filter's pipe), passed on to it; the caller keeps its own copies."""
        # The spec travels in a memory file the shell inherits, not a file in the data
        # directory: a file made and removed per command cost this VM's ext4 (no journal) a
        # scan of every recently freed inode at each later create (bench/PROFILE.md).
        self._spec = os.memfd_create("shellgate-standby-spec", os.MFD_CLOEXEC)
        self.memory_files: tuple[int, ...] = tuple(
            os.memfd_create("shellgate-standby-file", os.MFD_CLOEXEC) for _ in range(MEMORY_FILES)
        )
        status_read, status_write = _status_channel(witnessed=bool(sandbox))
        standby = [
            str(status_write),
            "reset" if sandbox or env_resets_signals() else "keep",
            str(self._spec),
            " ".join(map(str, self.memory_files)),
        ]
        environment = {"__SHELLGATE_CGROUPS": "\n".join(cgroup_procs), "PATH": os.defpath}
        if sandbox:
            # Inside, the standby shell runs its script's text: the script's path may be out
            # of the sandbox's sight (under /tmp).
            argv = [
                POSIX_SHELL or shell,  # where there is none, the server's shell
                str(SANDBOX_ENTRY_SCRIPT),
                *sandbox,
                *(shell, "--noprofile", "--norc", "-c", _standby_text(), str(STANDBY_SCRIPT)),
                *standby,
            ]
            environment["__SHELLGATE_IGNORE"] = " ".join(WRAPPER_IGNORED)
        else:
            argv = [shell, "--noprofile", "--norc", str(STANDBY_SCRIPT), *standby]
        try:
            self.popen: subprocess.Popen[bytes] = subprocess.Popen(
                argv,
                cwd="/",
                env=environment,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(status_write, self._spec, *self.memory_files, *pass_fds),
                start_new_session=True,
                close_fds=True,
            )
        except BaseException:
            os.close(status_read)
            os.close(self._spec)
            self.close_memory_files()
            raise
        finally:
            os.close(status_write)
        self._status = status_read
        self._sandboxed = bool(sandbox)
        # A pidfd of the process that becomes the command, when sandboxed (`take_witness`).
        self._witness: int | None = None
        lower_priority(self.popen.pid, nice)  # waiting: nothing forked yet

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        """Running and able to take a command: a stopped shell (SIGSTOP, a debugger) would
        hold its claim for as long as it stays stopped."""
        return self.popen.poll() is None and not process_stopped(self.pid)

    def claim(
        self,
        argv: list[str],
        cwd: str,
        env: dict[str, str],
        ulimit_steps: str,
        keep_memory_files: bool = False,
    ) -> None:
        """Blocking (a worker thread): returns once the command is exec'd; `OSError` when its
        directory or limits were refused (the standby then exits), `StandbyGone` when the
        standby could not take it (ended, or could not read its spec).

        `keep_memory_files`: the command keeps `memory_files` open (the caller then takes them
        with `take_memory_files`); otherwise they are closed in the command and here."""
        assert self.popen.stdin is not None
        fields = [
            cwd,
            ulimit_steps,
            "1" if keep_memory_files else "0",
            str(len(env)),
            *(f"{k}={v}" for k, v in env.items()),
            *argv,
        ]
        try:
            try:
                # At offset 0 and without moving the shared offset the shell reads from.
                _pwrite_all(self._spec, b"".join(os.fsencode(field) + b"\0" for field in fields))
            except OSError as error:  # no memory for it: the usual spawn
                raise StandbyGone() from error
            joined = b""
            if self._sandboxed:
                # Its sandbox built, the shell inside waits, and the kernel handed over a pidfd
                # of it with its `J` (`_receive_joined`): the process the command will be.
                joined = self._read_status(first_only=True)
                if joined != b"J":
                    raise StandbyGone()  # it ended before that
            try:
                self.popen.stdin.write(b"\n")
                self.popen.stdin.close()
            except BrokenPipeError as error:
                raise StandbyGone() from error
            status = joined + self._read_status()
        finally:
            self._close_spec()
        if not status.startswith(b"J"):
            raise StandbyGone()
        step = status[1:].strip()
        if step == b"exec":
            if not keep_memory_files:
                self.close_memory_files()
            return
        if step in (b"", b"spec"):
            # It died before its exec (killed meanwhile), or could not read what it was
            # given: nothing of the command ran, which the usual spawn then runs.
            self.popen.wait()
            raise StandbyGone()
        self.popen.wait()
        code = _FAILED_STEPS.get(step, errno.EINVAL)
        raise OSError(code, os.strerror(code))

    def _receive_joined(self) -> bytes:
        """The first byte on the status channel (`J`) and, from the kernel, a pidfd of the
        process that wrote it (`SO_PASSPIDFD`): the shell waiting inside the sandbox, which
        execs the command in place. No pidfd before Linux 6.5."""
        data, pidfd = receive_with_pidfd(self._status)  # the descriptor stays this object's
        if pidfd is not None:
            if self._witness is None:
                self._witness = pidfd
            else:
                os.close(pidfd)
        return data

    def take_witness(self) -> int | None:
        """The pidfd of the command's own process, now the caller's to close (None when the
        standby was not sandboxed or the kernel handed none over): `exit_witness.wait_status`
        tells how the command ended where bwrap would only pass it on as an exit status."""
        witness, self._witness = self._witness, None
        return witness

    def take_memory_files(self) -> tuple[int, ...]:
        """The memory files, now the caller's to close."""
        files, self.memory_files = self.memory_files, ()
        return files

    def close_memory_files(self) -> None:
        for fd in self.take_memory_files():
            os.close(fd)

    def _read_status(self, *, first_only: bool = False) -> bytes:
        """Everything on the status channel up to its close (the exec, or the shell's end),
        or, `first_only` (a sandboxed standby: `_receive_joined`), its first byte (`J`: the
        sandbox built; empty when the shell ended first), the channel then kept open for the
        rest. `StandbyGone` when the shell is stopped meanwhile: it would not go on until
        someone resumes it, and the command waiting for it spawns the usual way instead."""
        pieces = []
        waiting = select.poll()
        waiting.register(self._status, select.POLLIN)
        finished = True
        try:
            while True:
                if not waiting.poll(_STOPPED_CHECK_MS):
                    if process_stopped(self.pid):
                        # Killed now, stopped: resumed later, it would run the command
                        # that is about to be spawned the usual way.
                        self.popen.kill()
                        raise StandbyGone()
                    continue
                piece = self._receive_joined() if first_only else os.read(self._status, 64)
                if not piece:
                    break
                pieces.append(piece)
                if first_only:
                    finished = False
                    break
        finally:
            if finished:
                os.close(self._status)
                self._status = -1
        return b"".join(pieces)

    def dismiss(self) -> None:
        """Blocking: the unclaimed standby ends (EOF on its stdin) and is reaped."""
        with contextlib.suppress(OSError):
            if self.popen.stdin is not None:
                self.popen.stdin.close()
        if process_stopped(self.pid):  # it would not read the EOF: nothing of a command ran in it
            self.popen.kill()
        try:
            self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        if self._status >= 0:  # kept open until now: its `J` must not meet a closed pipe
            os.close(self._status)
            self._status = -1
        self._close_spec()
        self.close_memory_files()
        if (witness := self.take_witness()) is not None:
            os.close(witness)
        for pipe in (self.popen.stdout, self.popen.stderr):
            if pipe is not None:
                pipe.close()

    def _close_spec(self) -> None:
        if self._spec >= 0:
            os.close(self._spec)
            self._spec = -1
