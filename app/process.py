"""Spawning commands and signalling their process groups: the only module that touches file
descriptors, ptyprocess and signals.

Each execution runs in its own session (so its own process group). A pump thread per process
reads the pipes (or the PTY master) and hands chunks to a callback; the process is finished when
it *exits* (seen through a pidfd), not when its pipes reach EOF, so `sleep 5 & echo now`
returns at once.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import selectors
import signal
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from ptyprocess import PtyProcess

READ_SIZE = 256 * 1024
# A fast writer fills the default 64 KiB pipe between two reads; a larger pipe lets one read
# take more, which means fewer wake-ups and fewer (larger) chunks for the log and the sink.
PIPE_SIZE = 1024 * 1024
# After the leader exits, children that inherited the pipes may keep them open. Read what is
# already there, then stop: quiet for DRAIN_QUIET seconds, or DRAIN_MAX at most.
DRAIN_QUIET = 0.25
DRAIN_MAX = 2.0
PTY_DRAIN_QUIET = 0.3


class OutputStream(StrEnum):
    """Where a chunk of output came from: a pipe, or the terminal that merges both."""

    stdout = "stdout"
    stderr = "stderr"
    pty = "pty"


OutputCallback = Callable[[bytes, OutputStream], None]


@dataclass(frozen=True)
class ExitStatus:
    exit_code: int | None
    signal: int | None


@dataclass(frozen=True)
class SpawnSpec:
    argv: list[str]
    cwd: str
    env: dict[str, str]
    pty: bool = False
    rows: int = 40
    cols: int = 120


def _restore_default_signals() -> None:
    """Runs in the PTY child before exec: Python ignores SIGPIPE and SIGXFSZ, ignored signals
    survive exec, and ptyprocess (unlike subprocess) does not restore them, so `yes | head`
    would complain of a broken pipe instead of ending quietly."""
    for number in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(number, signal.SIG_DFL)


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_start_ticks(pid: int) -> int | None:
    """Start time of pid in clock ticks since boot (field 22 of /proc/pid/stat), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[19])


def group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def process_environ_has(pid: int, marker: bytes) -> bool:
    try:
        return marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def signal_group(pgid: int, sig: int) -> bool:
    """Signal a whole process group; never our own group, never init's. False if it is gone."""
    if pgid <= 1 or pgid == os.getpgrp():
        raise ValueError(f"refusing to signal process group {pgid}")
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True


class RunningProcess:
    """A spawned command: its ids, its input side, and the thread that pumps its output."""

    def __init__(
        self,
        spec: SpawnSpec,
        on_output: OutputCallback,
        on_exit: Callable[[ExitStatus], None],
    ) -> None:
        self._on_output = on_output
        self._on_exit = on_exit
        self._kill_on_exit = False
        # Guards the PTY fd: once the pump closes it, its number may be reused by another
        # execution, so no write or ioctl may reach it afterwards.
        self._pty_lock = threading.Lock()
        self._pty_open = spec.pty
        self._pty: PtyProcess | None = None
        self._popen: subprocess.Popen[bytes] | None = None
        if spec.pty:
            self._pty = PtyProcess.spawn(
                spec.argv,
                cwd=spec.cwd,
                env=spec.env,
                dimensions=(spec.rows, spec.cols),
                preexec_fn=_restore_default_signals,
            )
            self.pid: int = self._pty.pid
        else:
            self._popen = subprocess.Popen(
                spec.argv,
                cwd=spec.cwd,
                env=spec.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                close_fds=True,
            )
            self.pid = self._popen.pid
        # start_new_session / pty.fork make the child a session (and group) leader.
        self.pgid = self.pid
        self.start_ticks = process_start_ticks(self.pid)
        self._pidfd = os.pidfd_open(self.pid)
        self._thread = threading.Thread(target=self._pump, name=f"pump-{self.pid}", daemon=True)
        self._thread.start()

    @property
    def is_pty(self) -> bool:
        return self._pty is not None

    # --- control -----------------------------------------------------------------------------

    def signal(self, sig: int) -> bool:
        return signal_group(self.pgid, sig)

    def terminate_group(self) -> None:
        """SIGTERM the group, and make sure nothing of it outlives the leader."""
        self.kill_group_on_exit()
        with contextlib.suppress(ValueError):
            self.signal(signal.SIGTERM)

    def kill_group(self) -> None:
        """SIGKILL the group now (the escalation after a grace, or a spawn nobody may see)."""
        self.kill_group_on_exit()
        with contextlib.suppress(ValueError):
            self.signal(signal.SIGKILL)

    def kill_group_on_exit(self) -> None:
        """Ask the pump to SIGKILL the group once the leader exits, before reaping it.

        The leader stays a zombie until reaped, so its pid (the pgid) cannot be reused yet:
        killing the group at that moment cannot hit an unrelated process.
        """
        self._kill_on_exit = True

    def write_input(self, data: bytes) -> bool:
        """Type into the PTY; False once the terminal is closed."""
        if self._pty is None:
            raise RuntimeError("input needs a PTY")
        with self._pty_lock:
            if not self._pty_open:
                return False
            view = memoryview(data)
            while view:
                written = os.write(self._pty.fd, view)
                view = view[written:]
        return True

    def resize(self, rows: int, cols: int) -> bool:
        if self._pty is None:
            raise RuntimeError("resize needs a PTY")
        with self._pty_lock:
            if not self._pty_open:
                return False
            fcntl.ioctl(self._pty.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, signal.SIGWINCH)
        return True

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    # --- pump (runs in its own thread) --------------------------------------------------------

    def _pump(self) -> None:
        status = ExitStatus(exit_code=None, signal=None)
        try:
            if self._pty is not None:
                status = self._pump_pty(self._pty)
            else:
                assert self._popen is not None
                status = self._pump_pipes(self._popen)
        finally:
            os.close(self._pidfd)
            self._on_exit(status)

    def _reap(self) -> ExitStatus:
        if self._kill_on_exit:
            with contextlib.suppress(ValueError):
                signal_group(self.pgid, signal.SIGKILL)
        _, raw_status = os.waitpid(self.pid, 0)
        code = os.waitstatus_to_exitcode(raw_status)
        if code < 0:
            # Bash convention: killed by signal N reads as 128+N.
            return ExitStatus(exit_code=128 - code, signal=-code)
        return ExitStatus(exit_code=code, signal=None)

    def _pump_pipes(self, popen: subprocess.Popen[bytes]) -> ExitStatus:
        assert popen.stdout is not None and popen.stderr is not None
        streams = {
            popen.stdout.fileno(): OutputStream.stdout,
            popen.stderr.fileno(): OutputStream.stderr,
        }
        for fd in streams:
            with contextlib.suppress(OSError):  # capped by /proc/sys/fs/pipe-max-size
                fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        selector = selectors.DefaultSelector()
        for fd in streams:
            selector.register(fd, selectors.EVENT_READ)
        selector.register(self._pidfd, selectors.EVENT_READ)
        status: ExitStatus | None = None
        drain_started = last_output = 0.0
        try:
            while streams:
                if status is None:
                    timeout = None
                else:
                    now = time.monotonic()
                    if now - last_output >= DRAIN_QUIET or now - drain_started >= DRAIN_MAX:
                        break
                    timeout = DRAIN_QUIET - (now - last_output)
                for key, _ in selector.select(timeout):
                    fd = key.fd
                    if fd == self._pidfd:
                        selector.unregister(fd)
                        status = self._reap()
                        # Popen must not reap again: it would raise or block on a stale pid.
                        popen.returncode = status.exit_code
                        drain_started = last_output = time.monotonic()
                        continue
                    data = os.read(fd, READ_SIZE)
                    if not data:
                        selector.unregister(fd)
                        del streams[fd]
                        continue
                    last_output = time.monotonic()
                    self._on_output(data, streams[fd])
            if status is None:
                # Both pipes hit EOF before the exit was seen: wait for the exit itself.
                status = self._wait_exit()
                popen.returncode = status.exit_code
        finally:
            selector.close()
            popen.stdout.close()
            popen.stderr.close()
        return status

    def _pump_pty(self, pty: PtyProcess) -> ExitStatus:
        selector = selectors.DefaultSelector()
        selector.register(pty.fd, selectors.EVENT_READ)
        selector.register(self._pidfd, selectors.EVENT_READ)
        status: ExitStatus | None = None
        open_master = True
        last_output = 0.0
        try:
            while True:
                if status is not None:
                    if not open_master or time.monotonic() - last_output >= PTY_DRAIN_QUIET:
                        break
                    timeout: float | None = PTY_DRAIN_QUIET - (time.monotonic() - last_output)
                else:
                    timeout = None
                events = selector.select(timeout)
                for key, _ in events:
                    if key.fd == self._pidfd:
                        selector.unregister(self._pidfd)
                        status = self._reap()
                        last_output = time.monotonic()
                        continue
                    try:
                        data = os.read(pty.fd, READ_SIZE)
                    except OSError as error:
                        # EIO: every slave fd is closed (the session is gone).
                        if error.errno != errno.EIO:
                            raise
                        data = b""
                    if not data:
                        selector.unregister(pty.fd)
                        open_master = False
                        if status is None:
                            status = self._wait_exit()
                        break
                    last_output = time.monotonic()
                    self._on_output(data, OutputStream.pty)
                if not open_master:
                    break
        finally:
            selector.close()
            # Close through ptyprocess's own file object: closing the raw fd would leave that
            # object to close the same number again when collected, by then perhaps another
            # execution's pipe.
            with self._pty_lock, contextlib.suppress(OSError):
                self._pty_open = False
                pty.fileobj.close()
            # ptyprocess would otherwise try to close and reap in its __del__.
            pty.closed = True
            pty.terminated = True
        assert status is not None
        return status

    def _wait_exit(self) -> ExitStatus:
        select_one(self._pidfd, None)
        return self._reap()


def select_one(fd: int, timeout: float | None) -> bool:
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        return bool(selector.select(timeout))
