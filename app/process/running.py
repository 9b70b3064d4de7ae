"""Each execution runs in its own session (so its own process group). A pump thread per process
reads the pipes (or the PTY master) and hands chunks to a callback; the process is finished when
it *exits* (seen through a pidfd), not when its pipes reach EOF, so `sleep 5 & echo now`
returns at once.

Draining after the exit is bounded by the data, never by the clock (a CPU-starved pump must not
give up on bytes that are already written): every byte in the pipes when reading stops is read,
and reading goes on to EOF when no writer is left. When the group is being killed, its
members' writes end with them, so reading goes on until EOF or until the group is gone. A writer
that is not waited for — a background process left running, or one that escaped the group
(`setsid`) — gets LATE_WRITER_GRACE_SECONDS to close the output; if it still holds it then, the
pump takes what the pipes hold, stops, and says why in `ExitStatus.output_cut`.
"""

from __future__ import annotations

import array
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

from ptyprocess import PtyProcess

from app.process.confine_hooks import _bash_confinement_env, _child_setup
from app.process.groups import group_exists, process_start_ticks, signal_group
from app.process.spec import (
    ExitStatus,
    OutputCallback,
    OutputCut,
    OutputStream,
    SpawnSpec,
)

READ_SIZE = 256 * 1024
# A fast writer fills the default 64 KiB pipe between two reads; a larger pipe lets one read
# take more, which means fewer wake-ups and fewer (larger) chunks for the log and the sink.
PIPE_SIZE = 1024 * 1024
# While a dying group is being waited for after the leader's exit: how often to look whether
# any member is left (nothing signals the end of a whole group).
GROUP_POLL_SECONDS = 0.01
# After the leader's exit, how long a process left running may take to close the output before
# the run ends without it (a background child applying `> /dev/null`, `tee >(…)` finishing).
# It only decides how long to wait for such writers: bytes already in the pipes are read
# whatever the clock says.
LATE_WRITER_GRACE_SECONDS = 0.25
# A PTY says nothing of how much it holds: after the exit, the most read from a terminal that
# a process that is not waited for keeps writing to.
PTY_DRAIN_MAX_BYTES = 1024 * 1024


def bytes_buffered(fd: int) -> int:
    """How many bytes a pipe holds, ready to read (FIONREAD)."""
    count = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, count)
    return count[0]


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
                preexec_fn=_child_setup(spec, pty=True),
            )
            self.pid: int = self._pty.pid
        else:
            bash_env = _bash_confinement_env(spec)
            try:
                self._popen = subprocess.Popen(
                    spec.argv,
                    cwd=spec.cwd,
                    env=spec.env if bash_env is None else {**spec.env, **bash_env},
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                    close_fds=True,
                    preexec_fn=None if bash_env is not None else _child_setup(spec, pty=False),
                )
            except subprocess.SubprocessError as error:
                # The child could not confine itself (and exited without running anything).
                raise OSError(errno.EPERM, "could not confine the command") from error
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
        try:
            while streams and status is None:
                for key, _ in selector.select():
                    if key.fd == self._pidfd:
                        selector.unregister(self._pidfd)
                        status = self._reap()
                        # Popen must not reap again: it would raise or block on a stale pid.
                        popen.returncode = status.exit_code
                    else:
                        self._read_pipe(key.fd, streams, selector)
            if status is None:
                # Both pipes hit EOF before the exit was seen: wait for the exit itself.
                status = self._wait_exit()
                popen.returncode = status.exit_code
            else:
                cut = self._drain_pipes(streams, selector)
                if cut is not None:
                    status = ExitStatus(status.exit_code, status.signal, cut)
        finally:
            selector.close()
            popen.stdout.close()
            popen.stderr.close()
        return status

    def _read_pipe(
        self,
        fd: int,
        streams: dict[int, OutputStream],
        selector: selectors.BaseSelector,
        size: int = READ_SIZE,
    ) -> int:
        """One read from a pipe, handed on; at EOF the pipe is dropped. The bytes read."""
        data = os.read(fd, size)
        if not data:
            selector.unregister(fd)
            del streams[fd]
            return 0
        self._on_output(data, streams[fd])
        return len(data)

    def _drain_pipes(
        self, streams: dict[int, OutputStream], selector: selectors.BaseSelector
    ) -> OutputCut | None:
        """After the leader's exit: read on as the module docstring says; why it stopped
        short of EOF, or None when every pipe reached EOF."""
        if self._kill_on_exit:
            # The group was just sent SIGKILL: its members' last bytes are in the pipes or on
            # their way, and EOF follows their end unless something outside holds the pipes.
            while streams and group_exists(self.pgid):
                for key, _ in selector.select(GROUP_POLL_SECONDS):
                    self._read_pipe(key.fd, streams, selector)
        else:
            deadline = time.monotonic() + LATE_WRITER_GRACE_SECONDS
            while streams and (remaining := deadline - time.monotonic()) > 0:
                for key, _ in selector.select(remaining):
                    self._read_pipe(key.fd, streams, selector)
        # Whatever still holds the pipes is not waited for: take every byte already written.
        for fd in list(streams):
            pending = bytes_buffered(fd)
            while pending > 0 and fd in streams:
                pending -= self._read_pipe(fd, streams, selector, min(READ_SIZE, pending))
        # The last writer may have closed meanwhile (EOF): one more look at each pipe.
        for fd in list(streams):
            if select_one(fd, 0):
                self._read_pipe(fd, streams, selector)
        if not streams:
            return None
        return OutputCut.background if group_exists(self.pgid) else OutputCut.escaped

    def _pump_pty(self, pty: PtyProcess) -> ExitStatus:
        selector = selectors.DefaultSelector()
        selector.register(pty.fd, selectors.EVENT_READ)
        selector.register(self._pidfd, selectors.EVENT_READ)
        status: ExitStatus | None = None
        open_master = True
        try:
            while open_master and status is None:
                for key, _ in selector.select():
                    if key.fd == self._pidfd:
                        selector.unregister(self._pidfd)
                        status = self._reap()
                    elif self._read_pty(pty) == 0:
                        open_master = False
                        break
            if status is None:
                # Every slave fd closed before the exit was seen: wait for the exit itself.
                status = self._wait_exit()
            elif open_master:
                cut = self._drain_pty(pty, selector)
                if cut is not None:
                    status = ExitStatus(status.exit_code, status.signal, cut)
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
        return status

    def _read_pty(self, pty: PtyProcess, *, blocking: bool = True) -> int | None:
        """One read from the terminal, handed on; the bytes read, 0 once every slave fd is
        closed (EIO), None when a non-blocking read finds nothing to read."""
        try:
            if blocking:
                data = os.read(pty.fd, READ_SIZE)
            else:
                # A non-blocking read, unlike select, first moves what the slave side wrote
                # into the master's buffer (the kernel does that in a worker), so "nothing to
                # read" is true. The lock keeps write_input from meeting the flag.
                with self._pty_lock:
                    flags = fcntl.fcntl(pty.fd, fcntl.F_GETFL)
                    fcntl.fcntl(pty.fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)
                    try:
                        data = os.read(pty.fd, READ_SIZE)
                    finally:
                        fcntl.fcntl(pty.fd, fcntl.F_SETFL, flags)
        except BlockingIOError:
            return None
        except OSError as error:
            # EIO: every slave fd is closed (the session is gone).
            if error.errno != errno.EIO:
                raise
            data = b""
        if data:
            self._on_output(data, OutputStream.pty)
        return len(data)

    def _drain_pty(self, pty: PtyProcess, selector: selectors.BaseSelector) -> OutputCut | None:
        """The terminal's side of `_drain_pipes`: read to EIO, or while the group dies, then
        what the terminal holds (at most PTY_DRAIN_MAX_BYTES: it cannot say how much)."""
        if self._kill_on_exit:
            while group_exists(self.pgid):
                if selector.select(GROUP_POLL_SECONDS) and self._read_pty(pty) == 0:
                    return None
        else:
            deadline = time.monotonic() + LATE_WRITER_GRACE_SECONDS
            while (remaining := deadline - time.monotonic()) > 0:
                if selector.select(remaining) and self._read_pty(pty) == 0:
                    return None
        taken = 0
        while taken < PTY_DRAIN_MAX_BYTES:
            read = self._read_pty(pty, blocking=False)
            if read == 0:
                return None
            if read is None:
                break
            taken += read
        return OutputCut.background if group_exists(self.pgid) else OutputCut.escaped

    def _wait_exit(self) -> ExitStatus:
        select_one(self._pidfd, None)
        return self._reap()


def select_one(fd: int, timeout: float | None) -> bool:
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        return bool(selector.select(timeout))
