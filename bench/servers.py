"""Start servers for benchmarks as separate processes on loopback, so the client's own CPU use
does not share a GIL with the server it measures."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

TOKEN = "bench-agent-secret-0123456789"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    base_url: str
    pid: int


def _wait_ready(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not answer")


@contextlib.contextmanager
def _running(argv: list[str], env: dict[str, str], ready_url: str) -> Iterator[int]:
    process = subprocess.Popen(argv, env=env, start_new_session=True)
    try:
        _wait_ready(ready_url, process)
        yield process.pid
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def shellgate(**settings: str) -> Iterator[Server]:
    port = free_port()
    with tempfile.TemporaryDirectory() as scratch:
        env = {
            **os.environ,
            "SHELLGATE_PORT": str(port),
            "SHELLGATE_DATA_DIR": str(Path(scratch) / "data"),
            "SHELLGATE_WORKSPACE": scratch,
            "SHELLGATE_TOKENS": f"bench:admin:{TOKEN}",
            "SHELLGATE_LOG_LEVEL": "warning",
            **{f"SHELLGATE_{key.upper()}": value for key, value in settings.items()},
        }
        url = f"http://127.0.0.1:{port}"
        with _running([sys.executable, "-m", "app", "serve"], env, f"{url}/healthz") as pid:
            yield Server(url, pid)


@contextlib.contextmanager
def yardstick() -> Iterator[Server]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [
        sys.executable,
        "-m",
        "uvicorn",
        "bench.yardstick:app",
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    with _running(argv, dict(os.environ), f"{url}/docs") as pid:
        yield Server(url, pid)


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for {pid}")
