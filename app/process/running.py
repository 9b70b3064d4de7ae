"""Each execution runs in its own session (so its own process group). Its output is read by the
event loop, not by a thread of its own: the pipes (or the PTY master) are non-blocking and
watched with `loop.add_reader`, and so is a pidfd, which becomes readable when the process
*exits* — the process is finished at its exit, not when its pipes reach EOF, so
`sleep 5 & echo now` returns at once. Each wake-up reads at most READ_SIZE bytes from one
descriptor and hands them to a callback on the loop, so one fast writer cannot starve the loop
or the other executions: the selector gives every ready descriptor its turn.

Draining after the exit is bounded by the data, never by the clock (a CPU-starved loop must not
give up on bytes that are already written): every byte in the pipes when reading stops is read,
and reading goes on to EOF when no writer is left. When the group is being killed, its
members' writes end with them, so reading goes on until EOF or until the group is gone. A writer
that is not waited for — a background process left running, or one that escaped the group
(`setsid`) — gets LATE_WRITER_GRACE_SECONDS to close the output; if it still holds it then, the
reader takes what the pipes hold (FIONREAD says how much; at most PTY_DRAIN_MAX_BYTES from a
terminal, which cannot say), stops, and says why in `ExitStatus.output_cut`. That last drain is
done a READ_SIZE step per loop turn too.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import dataclasses
import errno
import fcntl
import logging
import os
import selectors
import signal
import struct
import subprocess
import termios
import threading
from collections.abc import Callable
from typing import IO

from ptyprocess import PtyProcess

from app.process.confine_hooks import _bash_confinement_env, _child_setup, ulimit_steps
from app.process.exit_witness import receive_with_pidfd, wait_status
from app.process.groups import group_exists, process_start_ticks, signal_group
from app.process.loop_read import LoopReader
from app.process.priority import lower_group_priority, nice_prefix
from app.process.signal_defaults import reset_prefix
from app.process.spec import (
    ExitStatus,
    OutputCallback,
    OutputCut,
    OutputStream,
    SpawnSpec,
)
from app.process.standby import StandbyGone, StandbyShell

logger = logging.getLogger("shellgate.process")

# The most bytes one wake-up of the loop reads from one descriptor: bounds the loop's work per
# callback (the log write and the inline window's work grow with it: ≈ 0.3 ms for text) and
# shares the loop fairly between fast writers, each ready descriptor getting a turn. A viewer's
# read (`app.executions.viewer.READ_BYTES`) takes one such chunk whole.
READ_SIZE = 256 * 1024
# A fast writer fills the default 64 KiB pipe between two reads; a larger pipe lets the
# writer run on while the loop serves others, instead of blocking after every read.
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
    """A spawned command: its ids, its input side, and the loop callbacks reading its output.

    The constructor spawns (it may run on a worker thread: see `app/executions/launch.py`);
    reading starts on `loop`, where `on_output` and `on_exit` are called.
    """

    def __init__(
        self,
        spec: SpawnSpec,
        on_output: OutputCallback,
        on_exit: Callable[[ExitStatus], None],
        loop: asyncio.AbstractEventLoop,
        standby: StandbyShell | None = None,
        witness_channel: int | None = None,
    ) -> None:
        """With `standby`, the command is exec'd by that shell (already in the cgroups of
        `spec.confinement`, whose limits its claim sets) instead of spawned here."""
        self._on_output = on_output
        self._on_exit = on_exit
        self._loop = loop
        self._kill_on_exit = False
        # Guards the PTY fd: once the reader closes it, its number may be reused by another
        # execution, so no write or ioctl (from a worker thread) may reach it afterwards.
        self._pty_lock = threading.Lock()
        self._pty_open = spec.pty
        self._pty: PtyProcess | None = None
        self._popen: subprocess.Popen[bytes] | None = None
        self._streams: dict[int, OutputStream] = {}
        self._pipes: dict[int, IO[bytes]] = {}  # the pipes' file objects, closed at their EOF
        # A pidfd of the command where it is not the leader's own process (sandboxed): how it
        # ended, which bwrap passes on only as an exit status. From the standby that ran it, or
        # (spawned without one) from `witness_channel`, the reading end of the channel the
        # command's process said its word on from inside the sandbox (app/sandbox/bwrap.py),
        # read in `_reap`, once bwrap has ended. Both are this object's to close.
        self._witness: int | None = None
        self._witness_channel = witness_channel
        self._sandboxed = spec.sandboxed
        try:
            if spec.pty:
                self._pty = PtyProcess.spawn(
                    spec.argv,
                    cwd=spec.cwd,
                    env=spec.env,
                    dimensions=(spec.rows, spec.cols),
                    preexec_fn=_child_setup(spec, pty=True),
                    pass_fds=spec.pass_fds,
                )
                self.pid: int = self._pty.pid
                self._streams[self._pty.fd] = OutputStream.pty
            else:
                if standby is not None:
                    self._popen = _claim(standby, spec)
                    self._witness = standby.take_witness()
                else:
                    self._popen = _spawn_with_pipes(spec)
                assert self._popen.stdout is not None and self._popen.stderr is not None
                self.pid = self._popen.pid
                self._pipes = {
                    pipe.fileno(): pipe for pipe in (self._popen.stdout, self._popen.stderr)
                }
                self._streams[self._popen.stdout.fileno()] = OutputStream.stdout
                self._streams[self._popen.stderr.fileno()] = OutputStream.stderr
                for fd in self._streams:
                    with contextlib.suppress(OSError):  # capped by /proc/sys/fs/pipe-max-size
                        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
            for fd in self._streams:
                os.set_blocking(fd, False)
            # start_new_session / pty.fork make the child a session (and group) leader.
            self.pgid = self.pid
            if standby is None:  # a standby was lowered when it was started
                lower_group_priority(self.pid, spec.nice)
            self.start_ticks = process_start_ticks(self.pid)
            self._pidfd = os.pidfd_open(self.pid)
        except BaseException:
            self._close_witness()  # not left open for a process nobody will reap here
            raise
        self._status: ExitStatus | None = None
        self._ended = False
        self._timer: asyncio.Handle | None = None
        self._drain_left: dict[int, int] = {}
        self._input_ready: asyncio.Future[None] | None = None
        self._input_lock = asyncio.Lock()
        self._started = self._paused = self._final = False
        if _running_loop() is loop:
            self._start()
        else:
            loop.call_soon_threadsafe(self._start)

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
        """Ask the reader to SIGKILL the group once the leader exits, before reaping it.

        The leader stays a zombie until reaped, so its pid (the pgid) cannot be reused yet:
        killing the group at that moment cannot hit an unrelated process.
        """
        self._kill_on_exit = True

    async def send_input(self, data: bytes) -> bool:
        """Type into the PTY, on the loop (a keystroke costs no thread hop); False once the
        terminal is closed. When the terminal's input queue is full (the program does not
        read), waits until it takes more: the master is non-blocking."""
        pty = self._require_pty("input")
        # Inputs reach the terminal whole and in the order they came: one that arrives while
        # an earlier one waits for room queues behind it (an uncontended lock never suspends,
        # so a keystroke still goes straight to the write).
        async with self._input_lock:
            view = memoryview(data)
            while view:
                if not self._pty_open:
                    return False
                try:
                    view = view[os.write(pty.fd, view) :]
                except BlockingIOError:
                    self._input_ready = self._loop.create_future()
                    self._loop.add_writer(pty.fd, self._input_drained)
                    try:
                        await self._input_ready
                    finally:
                        self._input_ready = None
                        if self._pty_open:
                            self._loop.remove_writer(pty.fd)
        return True

    def _input_drained(self) -> None:
        if self._input_ready is not None and not self._input_ready.done():
            self._input_ready.set_result(None)

    def resize(self, rows: int, cols: int) -> bool:
        pty = self._require_pty("resize")
        with self._pty_lock:
            if not self._pty_open:
                return False
            fcntl.ioctl(pty.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, signal.SIGWINCH)
        return True

    def _require_pty(self, what: str) -> PtyProcess:
        if self._pty is None:
            raise RuntimeError(f"{what} needs a PTY")
        return self._pty

    def pause_reading(self) -> None:
        """Stop reading the output until `resume_reading` (the taker is behind). The exit is
        still seen. After the exit it does nothing: a paused reader would keep a late writer
        blocked on a full pipe until the grace ran out, and cut bytes that were coming."""
        if not self._paused and self._status is None:
            self._paused = True
            if self._reading_live():
                for fd in self._streams:
                    self._loop.remove_reader(fd)

    def resume_reading(self) -> None:
        if self._paused:
            self._paused = False
            if self._reading_live():
                for fd in self._streams:
                    self._loop.add_reader(fd, self._readable, fd)

    def _reading_live(self) -> bool:
        """Whether the streams are (to be) watched by readers: started, not yet in the final
        drain, not ended."""
        return self._started and not self._drain_left and not self._final and not self._ended

    # --- reading (loop callbacks) -------------------------------------------------------------

    def _start(self) -> None:
        self._started = True
        if not self._paused:
            for fd in self._streams:
                self._loop.add_reader(fd, self._readable, fd)
        self._loop.add_reader(self._pidfd, self._exited)

    def _readable(self, fd: int) -> None:
        self._read(fd, READ_SIZE)
        if not self._streams and self._status is not None:
            self._end(None)

    def _read(self, fd: int, size: int) -> int | None:
        """Non-blocking reads of up to `size` bytes in all, handed on as one chunk; the bytes
        read, 0 at EOF (the stream is then closed), None when there was nothing to read.

        A terminal hands out at most a few KiB per read whatever it holds, so it is read again
        until it is empty or `size` is reached: one wake-up, one chunk for the log and the
        window, instead of one per 4 KiB. A pipe's short read means it is empty. The reads keep
        the interpreter lock (app/process/loop_read.py)."""
        reader = LoopReader()
        taken = 0
        at_eof = False
        while taken < size:
            wanted = size - taken
            try:
                count = reader.read_into(fd, wanted)
            except BlockingIOError:
                break
            except OSError as error:
                # EIO from a PTY master: every slave fd is closed (the session is gone).
                if error.errno != errno.EIO:
                    logger.error("reading the output of pid %d failed", self.pid, exc_info=error)
                count = 0
            if not count:
                at_eof = True
                break
            taken += count
            if self._pty is None and count < wanted:
                break
        if taken:
            self._hand_on(fd, reader.take())
        if at_eof:
            self._close_stream(fd)
        if taken:
            return taken
        return 0 if at_eof else None

    def _hand_on(self, fd: int, data: bytes) -> None:
        try:
            self._on_output(data, self._streams[fd])
        except Exception:
            # A bug downstream must not leave the reader spinning on a ready descriptor: stop
            # reading (the writer gets EPIPE) and still report the exit.
            logger.exception("output of pid %d could not be taken; reading stops", self.pid)
            for open_fd in list(self._streams):
                self._close_stream(open_fd)

    def _exited(self) -> None:
        """The pidfd is readable: the leader exited (a zombie until reaped here)."""
        self._loop.remove_reader(self._pidfd)
        self.resume_reading()
        self._status = self._reap()
        if self._popen is not None:
            # Popen must not reap again: it would raise or block on a stale pid.
            self._popen.returncode = self._status.exit_code
        if not self._streams:
            self._end(None)
        elif self._kill_on_exit:
            self._watch_dying_group()
        else:
            self._timer = self._loop.call_later(LATE_WRITER_GRACE_SECONDS, self._begin_final_drain)

    def _reap(self) -> ExitStatus:
        if self._kill_on_exit:
            with contextlib.suppress(ValueError):
                signal_group(self.pgid, signal.SIGKILL)
        _, raw_status = os.waitpid(self.pid, 0)  # exited: does not block
        if self._witness is None and self._witness_channel is not None:
            # Said before the command's exec, if ever, so there by now: bwrap has ended.
            word, self._witness = receive_with_pidfd(self._witness_channel, wait=False)
            if word != b"J":
                self._close_witness()
        witnessed = None if self._witness is None else wait_status(self._witness)
        self._close_witness()
        code = os.waitstatus_to_exitcode(raw_status if witnessed is None else witnessed)
        if code < 0:
            # Bash convention: killed by signal N reads as 128+N.
            return ExitStatus(exit_code=128 - code, signal=-code)
        return ExitStatus(code, None, passed_on=self._sandboxed and witnessed is None)

    def _close_witness(self) -> None:
        for fd in (self._witness, self._witness_channel):
            if fd is not None:
                os.close(fd)
        self._witness = self._witness_channel = None

    def _watch_dying_group(self) -> None:
        """The group was just sent SIGKILL: its members' last bytes are in the pipes or on their
        way, and EOF follows their end unless something outside holds the output."""
        self._timer = None
        if self._ended or not self._streams:
            return
        if group_exists(self.pgid):
            self._timer = self._loop.call_later(GROUP_POLL_SECONDS, self._watch_dying_group)
        else:
            self._begin_final_drain()

    def _begin_final_drain(self) -> None:
        """Whatever still holds the output is not waited for: take what is already written."""
        self._timer = None
        if self._ended or not self._streams:
            return
        self._final = True
        for fd in self._streams:
            self._loop.remove_reader(fd)
            self._drain_left[fd] = PTY_DRAIN_MAX_BYTES if self._pty else bytes_buffered(fd)
        self._drain_step()

    def _drain_step(self) -> None:
        """One READ_SIZE read of the final drain per loop turn."""
        for fd in list(self._drain_left):
            left = self._drain_left[fd]
            read = self._read(fd, min(READ_SIZE, left)) if left > 0 else None
            if not read:  # EOF (closed), nothing more, or the quota is taken
                del self._drain_left[fd]
                if read is None and fd in self._streams and not self._pty:
                    # The last writer may have closed meanwhile: one more look for EOF.
                    self._read(fd, READ_SIZE)
                continue
            self._drain_left[fd] = left - read
            self._loop.call_soon(self._drain_step)
            return
        if not self._streams:
            self._end(None)
        else:
            self._end(OutputCut.background if group_exists(self.pgid) else OutputCut.escaped)

    def _close_stream(self, fd: int) -> None:
        if self._streams.pop(fd, None) is None:
            return
        self._loop.remove_reader(fd)
        self._drain_left.pop(fd, None)
        if self._pty is not None:
            # A keystroke waiting for room must not stay registered on a closed number.
            self._loop.remove_writer(fd)
            # Close through ptyprocess's own file object: closing the raw fd would leave that
            # object to close the same number again when collected, by then perhaps another
            # execution's pipe.
            with self._pty_lock, contextlib.suppress(OSError):
                self._pty_open = False
                self._pty.fileobj.close()
            # ptyprocess would otherwise try to close and reap in its __del__.
            self._pty.closed = True
            self._pty.terminated = True
            self._input_drained()
        else:
            self._pipes.pop(fd).close()

    def _end(self, cut: OutputCut | None) -> None:
        if self._ended:
            return
        self._ended = True
        if self._timer is not None:
            self._timer.cancel()
        for fd in list(self._streams):
            self._close_stream(fd)
        os.close(self._pidfd)
        assert self._status is not None
        status = self._status
        if cut is not None:
            status = dataclasses.replace(status, output_cut=cut)
        on_exit = self._on_exit
        # The callbacks are the execution's bound methods, and the execution holds this
        # process: left in place, that cycle kept both (windows, buffers, file objects) until
        # the cyclic collector's next full pass, which RSS measured as growth under load.
        self._on_output, self._on_exit = _ignore_output, _ignore_exit
        on_exit(status)


def _spawn_with_pipes(spec: SpawnSpec) -> subprocess.Popen[bytes]:
    bash_env = _bash_confinement_env(spec)
    try:
        return subprocess.Popen(
            [*nice_prefix(spec.nice), *reset_prefix(), *spec.argv],
            cwd=spec.cwd,
            env=spec.env if bash_env is None else {**spec.env, **bash_env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
            pass_fds=spec.pass_fds,
            preexec_fn=None if bash_env is not None else _child_setup(spec, pty=False),
        )
    except subprocess.SubprocessError as error:
        # The child could not confine itself (and exited without running anything).
        raise OSError(errno.EPERM, "could not confine the command") from error


def _claim(standby: StandbyShell, spec: SpawnSpec) -> subprocess.Popen[bytes]:
    rlimits = spec.confinement.rlimits if spec.confinement is not None else ()
    steps = ulimit_steps(rlimits)
    if steps is None:
        standby.dismiss()
        raise StandbyGone()  # limits bash cannot set: the usual spawn sets them
    try:
        standby.claim(spec.argv, spec.cwd, spec.env, steps, spec.keep_memory_files)
    except BaseException:
        standby.dismiss()  # it has exited, or exits now: reaped, its pipes closed
        raise
    return standby.popen


def _ignore_output(data: bytes, stream: OutputStream) -> None:
    pass


def _ignore_exit(status: ExitStatus) -> None:
    pass


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def select_one(fd: int, timeout: float | None) -> bool:
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        return bool(selector.select(timeout))
