"""How the server starts its own helper children (`line_child.py`, `message_child.py`):
`python -m <module>` with pipes on stdin and stdout, and none of the server's environment.

None outlives the server: each is spawned with the kernel's parent-death signal set to SIGKILL
(`PR_SET_PDEATHSIG`, between fork and exec, so there is no moment without it). Before, a helper
outlived a SIGKILLed server for as long as its work took (a command reader mid-parse), and for
good when it was stopped: nothing but the kernel signals a stopped process whose parent is
gone. The signal follows the *thread* that spawned the child, and the worker threads helpers
were spawned on end when idle, so one thread of its own, living as long as the server, makes
every helper."""

from __future__ import annotations

import ctypes
import functools
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Final

# `app` may not be installed (a checkout): the child finds it where this package is.
_ROOT: Final = str(Path(__file__).resolve().parent.parent.parent)
# What the interpreter and the dynamic loader may need to start (a Python built elsewhere, a
# locale); nothing else of the server's environment, where tokens and secrets live.
_INTERPRETER_VARIABLES: Final = (
    "PATH",
    "PYTHONHOME",
    "LD_LIBRARY_PATH",
    "LANG",
    "LC_ALL",
    "TMPDIR",
)


def helper_environment() -> dict[str, str]:
    """The environment of the server's helper children: the interpreter's variables and a
    PYTHONPATH that finds `app` (the server's own entries after it, the absolute ones only:
    an empty or relative one would name a directory a command may write to)."""
    env = {name: os.environ[name] for name in _INTERPRETER_VARIABLES if name in os.environ}
    inherited = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    env["PYTHONPATH"] = os.pathsep.join([_ROOT, *filter(os.path.isabs, inherited)])
    return env


_PR_SET_PDEATHSIG: Final = 1
# Resolved here, in the server: the child between fork and exec only calls it.
_PRCTL: Final = ctypes.CDLL(None, use_errno=True).prctl


def _die_with(parent: int) -> None:
    """In the child, before exec: SIGKILL when the spawning thread (or the server) ends; and
    leave at once if the server died before this ran."""
    _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


_Job = tuple[Callable[[], "subprocess.Popen[bytes]"], "Future[subprocess.Popen[bytes]]"]


class _Spawner:
    """One thread, started with the first helper, that makes every helper: the kernel's
    death signal (`_die_with`) fires when the thread that spawned a child ends, and the
    worker threads helpers were spawned on end when idle."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = -1

    def spawn(self, make: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
        done: Future[subprocess.Popen[bytes]] = Future()
        with self._lock:
            if self._thread is None or self._pid != os.getpid():  # a forked server: anew
                self._jobs = queue.SimpleQueue()
                self._thread = threading.Thread(target=self._run, name="helper-spawner")
                self._thread.daemon = True
                self._pid = os.getpid()
                self._thread.start()
            self._jobs.put((make, done))
        return done.result()

    def _run(self) -> None:
        jobs = self._jobs
        while True:
            make, done = jobs.get()
            try:
                done.set_result(make())
            except BaseException as error:
                done.set_exception(error)


_SPAWNER: Final = _Spawner()


def spawn_helper(
    module: str, *, stderr: int | None = None, own_session: bool = False
) -> subprocess.Popen[bytes]:
    """`python -P -m <module>` in `/`, stdin and stdout piped; stderr the server's unless
    given; in a session of its own if `own_session` (where the kernel groups sessions for
    scheduling, its CPU is then not the server's group's). `-P`: `python -m` would otherwise
    put its working directory first on the path, and a server started in its workspace would
    then run whatever `app` package a command wrote there as its window process or command
    reader — the policy's reading of every long command with it."""
    return _SPAWNER.spawn(
        lambda: subprocess.Popen(
            [sys.executable, "-P", "-m", module],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            cwd="/",
            env=helper_environment(),
            close_fds=True,
            start_new_session=own_session,
            preexec_fn=functools.partial(_die_with, os.getpid()),
        )
    )


def process_stopped(pid: int) -> bool:
    """`pid` is stopped (SIGSTOP, a tracer): its state in `/proc/<pid>/stat` is T or t. It
    does nothing until someone resumes it, so no wait for it is worth its deadline."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b") ")[2][:1] in (b"T", b"t")
    except OSError:
        return False


# How often a caller waiting for a helper's answer looks whether the helper was stopped.
WATCH_SECONDS: Final = 0.1


def watch_helper(
    process: subprocess.Popen[bytes], answered: threading.Event, within: float | None = None
) -> None:
    """Until `answered` is set, kill `process` (by its pid) once it is seen stopped, or once
    `within` seconds have passed: a wait on it then ends with EOF. On a thread of its own."""

    def watch() -> None:
        deadline = None if within is None else time.monotonic() + within
        while not answered.wait(WATCH_SECONDS):
            if (deadline is not None and time.monotonic() >= deadline) or process_stopped(
                process.pid
            ):
                process.kill()
                return

    threading.Thread(target=watch, name="helper-watch", daemon=True).start()
