"""Unsandboxed commands end with their server, `kill -9` included (docs/operations.md, "When a
replica dies").

With the sandbox on, bwrap's PID namespace dies with the server and takes every process of a
command along. Without it nothing in the kernel ties a command to its server: a parent-death
signal reaches only the process it is set on, never what left the group (`setsid`, a double
fork, `nohup … &`), and a killed server runs no code. So one helper process watches the server
for them: the server tells it, over a pipe, each unsandboxed execution before its spawn and
each one's end; when the pipe reaches end of file — the server exited, however — the watcher
kills what the server left: every process carrying a listed execution's marker (stopped
first, so that none forks away meanwhile) and every listed process group whose leader is
still the one it was told of. Then it exits.

The watcher is started with the first unsandboxed command, in a session of its own, without
a parent-death signal (it must outlive the server), and keeps nothing of the server's
environment. Every file descriptor the server opens is close-on-exec, so no command holds
the pipe's writing end: its end of file is the server's.

Protocol (one line a message, atomic under PIPE_BUF): `+ <id>` before the spawn, `g <id>
<pgid> <start ticks>` once the group is known, `- <id>` at the end."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading

from app.process.environment import EXECUTION_MARKER
from app.process.groups import kill_marked_processes, process_start_ticks
from app.process.helper_children import helper_environment

logger = logging.getLogger("shellgate.process")


class FenceWatch:
    """The server's side: lines to the watcher, started on first use. A watcher that cannot
    be started or died is logged once; commands then run as before (the next start's sweep
    ends what survives a kill)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._fd: int | None = None
        self._broken = False

    def _send(self, line: str) -> None:
        with self._lock:
            if self._broken:
                return
            if self._fd is None:
                try:
                    self._start()
                except OSError as error:
                    self._broken = True
                    logger.error("fence watcher could not start: %s", error)
                    return
            assert self._fd is not None
            try:
                os.write(self._fd, line.encode() + b"\n")
            except OSError as error:
                self._broken = True
                logger.error("fence watcher gone (%s): a kill -9 would leave commands", error)

    def _start(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-P", "-m", "app.process.fence_watch"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            cwd="/",
            env=helper_environment(),
            close_fds=True,
            start_new_session=True,  # out of the server's group: a signal to it spares this
        )
        assert self._process.stdin is not None
        # The raw descriptor: writes from worker threads, each line one write.
        self._fd = self._process.stdin.fileno()

    def spawning(self, execution_id: str) -> None:
        self._send(f"+ {execution_id}")

    def spawned(self, execution_id: str, pgid: int) -> None:
        ticks = process_start_ticks(pgid)
        if ticks is not None:
            self._send(f"g {execution_id} {pgid} {ticks}")

    def ended(self, execution_id: str) -> None:
        if self._fd is not None:
            self._send(f"- {execution_id}")

    def close(self) -> None:
        """The server's own stop: the watcher ends what is still listed (nothing, normally)."""
        with self._lock:
            process, self._process, self._fd = self._process, None, None
            self._broken = True
        if process is not None:
            assert process.stdin is not None
            with contextlib.suppress(OSError):
                process.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(10)


def _kill_leftovers(listed: dict[str, tuple[int, int] | None]) -> int:
    killed = 0
    for execution_id, group in listed.items():
        if group is not None:
            pgid, ticks = group
            # The leader still the one the server named: not a reused pid.
            if pgid > 1 and process_start_ticks(pgid) == ticks:
                with contextlib.suppress(OSError):
                    os.killpg(pgid, signal.SIGKILL)
                    killed += 1
        killed += kill_marked_processes(f"{EXECUTION_MARKER}={execution_id}".encode())
    return killed


def main() -> None:
    # A SIGTERM or SIGINT for the server's terminal or container is not this one's to obey
    # before its work is done; SIGKILL still ends it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    listed: dict[str, tuple[int, int] | None] = {}
    for raw in sys.stdin.buffer:
        parts = raw.decode("ascii", "replace").split()
        if len(parts) == 2 and parts[0] == "+":
            listed[parts[1]] = None
        elif len(parts) == 4 and parts[0] == "g" and parts[1] in listed:
            listed[parts[1]] = (int(parts[2]), int(parts[3]))
        elif len(parts) == 2 and parts[0] == "-":
            listed.pop(parts[1], None)
    if listed:
        killed = _kill_leftovers(listed)
        print(
            f"shellgate fence watcher: the server is gone; {killed} processes of "
            f"{len(listed)} executions killed",
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
