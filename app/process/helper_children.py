"""How the server starts its own helper children (`line_child.py`, `message_child.py`):
`python -m <module>` with pipes on stdin and stdout, and none of the server's environment."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
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


def spawn_helper(module: str, *, stderr: int | None = None) -> subprocess.Popen[bytes]:
    """`python -P -m <module>` in `/`, stdin and stdout piped; stderr the server's unless
    given. `-P`: `python -m` would otherwise put its working directory first on the path,
    and a server started in its workspace would then run whatever `app` package a command
    wrote there as its window process or command reader — the policy's reading of every
    long command with it."""
    return subprocess.Popen(
        [sys.executable, "-P", "-m", module],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        cwd="/",
        env=helper_environment(),
        close_fds=True,
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
