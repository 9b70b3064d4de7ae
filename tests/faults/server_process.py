"""A real `python -m app serve` in a child process, for faults a thread cannot take (signals)."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import AGENT, TOKENS, free_port, listens_on
from tests.databases import ServerDatabase

ROOT = Path(__file__).resolve().parents[2]
# Starts on a fresh port after another server took the one `free_port` gave (`listens_on`).
START_ATTEMPTS = 3


@dataclass
class ServerProcess:
    process: subprocess.Popen[bytes]
    base_url: str
    log_path: Path

    def client(self, token: str = AGENT, timeout: float = 30) -> httpx.Client:
        return httpx.Client(
            base_url=self.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def server_env(tmp: Path, database: ServerDatabase, **settings: Any) -> dict[str, str]:
    workspace = tmp / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    env = {key: value for key, value in os.environ.items() if not key.startswith("SHELLGATE_")}
    env.update(
        SHELLGATE_DATA_DIR=str(tmp / "data"),
        SHELLGATE_WORKSPACE=str(workspace),
        SHELLGATE_TOKENS=TOKENS,
        SHELLGATE_LOG_LEVEL="info",
        # The faults look at the host's pids and groups: unsandboxed, as the in-process servers
        # (tests/conftest.py); tests/api/test_sandbox.py runs it on.
        SHELLGATE_SANDBOX="off",
        **database.environment(),
    )
    for key, value in settings.items():
        env[f"SHELLGATE_{key.upper()}"] = value if isinstance(value, str) else json.dumps(value)
    return env


@contextlib.contextmanager
def server_process(
    env: dict[str, str],
    log_path: Path,
    port: int | None = None,
    cwd: Path = ROOT,
    open_files: tuple[int, int] | None = None,
    cgroups: tuple[Path, ...] = (),
) -> Iterator[ServerProcess]:
    """`cwd`: where the server is started (elsewhere than the checkout, `app` is found through
    PYTHONPATH). `open_files`: the (soft, hard) RLIMIT_NOFILE it is started with. `cgroups`:
    cgroup directories (the test's own, below its process's) it starts in."""
    if cwd != ROOT:
        env = {
            **env,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
        }
    # A port the test did not name may be taken by another test's server before this one binds
    # it (`listens_on`): then this one exits, and starts again on another.
    for attempt in range(1 if port else START_ATTEMPTS):
        live = _start(env, log_path, port or free_port(), cwd, open_files, cgroups)
        try:
            if _ready(live):
                break
        except BaseException:
            _kill(live.process)
            raise
        _kill(live.process)
        if attempt == START_ATTEMPTS - 1 or port:
            raise RuntimeError(f"another server took the port each time:\n{live.log()}")
    try:
        yield live
    finally:
        _kill(live.process)


def _start(
    env: dict[str, str],
    log_path: Path,
    port: int,
    cwd: Path,
    open_files: tuple[int, int] | None,
    cgroups: tuple[Path, ...],
) -> ServerProcess:
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-P", "-m", "app", "serve", "--port", str(port)],
            cwd=cwd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_before_exec(open_files, cgroups) if open_files or cgroups else None,
        )
    return ServerProcess(process, f"http://127.0.0.1:{port}", log_path)


def _ready(live: ServerProcess) -> bool:
    """True once `live` answers on its port; False when another process holds the port (and
    `live` exited for it, or answers nothing of its own)."""
    process, port = live.process, int(live.base_url.rsplit(":", 1)[1])
    deadline = time.monotonic() + 60
    while True:
        mine = listens_on(process.pid, port)
        if process.poll() is not None:
            if "address already in use" in live.log():
                return False
            raise RuntimeError(f"server exited at start:\n{live.log()}")
        with contextlib.suppress(httpx.TransportError):
            if mine and httpx.get(f"{live.base_url}/healthz", timeout=2).status_code == 200:
                return True
        if time.monotonic() > deadline:
            raise RuntimeError(f"server did not start:\n{live.log()}")
        time.sleep(0.05)


def _kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)  # only this test's own server, by its pid
    process.wait(30)


def _before_exec(
    open_files: tuple[int, int] | None, cgroups: tuple[Path, ...]
) -> Callable[[], None]:
    def prepare() -> None:
        if open_files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, open_files)
        for directory in cgroups:
            (directory / "cgroup.procs").write_text("0")  # this process, before the exec

    return prepare
