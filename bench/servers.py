"""Start servers for benchmarks as separate processes on loopback, so the client's own CPU use
does not share a GIL with the server it measures: shellgate and its peers (SWE-ReX, terminado,
the minimal app). Each is stopped by its pid when its block ends."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.tree_cpu import TreeCpu

TOKEN = "bench-agent-secret-0123456789"
BENCH_DIR = Path(__file__).resolve().parent
PEERS_VENV = BENCH_DIR / ".peers-venv"
PEERS_REQUIREMENTS = BENCH_DIR / "peers-requirements.txt"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    base_url: str
    pid: int
    # From spawning the process to the first 200 of its health URL.
    startup_s: float
    headers: dict[str, str]
    # CPU of its whole process tree (bench/tree_cpu.py).
    tree: TreeCpu

    def tree_cpu_seconds(self) -> float:
        return self.tree.seconds()


def ensure_peers_venv() -> Path:
    """The peers' own virtualenv, (re)installed when the pinned requirements change. Returns
    its bin directory."""
    stamp = PEERS_VENV / ".installed"
    wanted = PEERS_REQUIREMENTS.read_text()
    if not (stamp.exists() and stamp.read_text() == wanted):
        if not (PEERS_VENV / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(PEERS_VENV)], check=True)
        pip = [str(PEERS_VENV / "bin" / "pip"), "install", "-q"]
        subprocess.run([*pip, "-r", str(PEERS_REQUIREMENTS)], check=True, timeout=600)
        stamp.write_text(wanted)
    return PEERS_VENV / "bin"


def _wait_ready(url: str, headers: dict[str, str], process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            if httpx.get(url, headers=headers, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.01)
    raise RuntimeError(f"{url} did not answer")


@contextlib.contextmanager
def running(
    argv: list[str],
    env: dict[str, str],
    base_url: str,
    health: str,
    headers: dict[str, str],
    quiet: bool = False,
) -> Iterator[Server]:
    tree = TreeCpu(base_url.rsplit(":", 1)[-1])
    started = time.perf_counter()
    output = subprocess.DEVNULL if quiet else None
    process = subprocess.Popen(
        argv,
        env=env,
        start_new_session=True,
        cwd=BENCH_DIR.parent,
        stdout=output,
        stderr=output,
        # Into its accounting cgroup before exec (the bench has no other thread at that point).
        preexec_fn=tree.enter,
    )
    tree.pid = process.pid
    try:
        _wait_ready(base_url + health, headers, process)
        yield Server(base_url, process.pid, time.perf_counter() - started, headers, tree)
    finally:
        stop(process)
        tree.remove()


def stop(process: subprocess.Popen[bytes]) -> None:
    """TERM the server we started, KILL it if it outlives 15 s."""
    process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def compile_bytecode(tree: Path = BENCH_DIR.parent) -> None:
    """Byte-compile the app as an install does (pip compiles what it installs; the Dockerfile
    runs compileall). With PYTHONDONTWRITEBYTECODE set, as on the development VM, an editable
    checkout would otherwise compile every module from source at every start, which is about
    half of shellgate's start there (bench/PROFILE.md), a cost the peers, installed into a
    virtualenv with their bytecode, never pay. A no-op when the bytecode is current."""
    command = [sys.executable, "-m", "compileall", "-q", "app", "migrations"]
    subprocess.run(command, cwd=tree, check=True, stdout=subprocess.DEVNULL)


_SCRATCH: list[str] = []


@atexit.register
def _remove_scratch() -> None:
    for scratch in _SCRATCH:
        shutil.rmtree(scratch, ignore_errors=True)


def scratch_directory() -> str:
    """A server's scratch directory, removed when the benchmark process ends, not when the
    server stops: removing a round's thousands of log files would land in the next round's
    measurement. On ext4 without a journal (this project's VMs) every file created in a block
    group first skips each inode freed there in the last seconds, and shellgate creates files
    per call where its peers create none (bench/PROFILE.md, "Files per call")."""
    scratch = tempfile.mkdtemp(prefix="shellgate-bench-")
    _SCRATCH.append(scratch)
    return scratch


@contextlib.contextmanager
def shellgate(
    port: int | None = None, data_dir: Path | None = None, **settings: str
) -> Iterator[Server]:
    """A shellgate server; on a fresh data directory in a scratch directory unless `data_dir`
    names one to reuse."""
    compile_bytecode()
    port = port or free_port()
    scratch = scratch_directory()
    env = {
        **os.environ,
        "SHELLGATE_HOST": "127.0.0.1",
        "SHELLGATE_PORT": str(port),
        "SHELLGATE_DATA_DIR": str(data_dir or Path(scratch) / "data"),
        "SHELLGATE_WORKSPACE": scratch,
        "SHELLGATE_TOKENS": f"bench:admin:{TOKEN}",
        "SHELLGATE_LOG_LEVEL": "warning",
        **{f"SHELLGATE_{key.upper()}": value for key, value in settings.items()},
    }
    headers = {"Authorization": f"Bearer {TOKEN}"}
    url = f"http://127.0.0.1:{port}"
    with running([sys.executable, "-m", "app", "serve"], env, url, "/healthz", headers) as s:
        yield s


@contextlib.contextmanager
def yardstick() -> Iterator[Server]:
    """The minimal app on stdlib asyncio and h11 (not uvloop/httptools)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [
        *(sys.executable, "-m", "uvicorn", "bench.yardstick:app"),
        *("--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"),
        *("--loop", "asyncio", "--http", "h11"),
    ]
    with running(argv, dict(os.environ), url, "/healthz", {}) as server:
        yield server


@contextlib.contextmanager
def swerex(peers_bin: Path) -> Iterator[Server]:
    """SWE-ReX's `swerex-remote` (FastAPI on uvicorn; its venv has neither uvloop nor
    httptools, so stdlib asyncio and h11). Every request carries the X-API-Key token. It logs
    an access line per request (it has no option against that); the lines go to /dev/null."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [str(peers_bin / "swerex-remote"), "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--auth-token", TOKEN]
    headers = {"X-API-Key": TOKEN}
    env = {key: value for key, value in os.environ.items() if key != "VIRTUAL_ENV"}
    with running(argv, env, url, "/is_alive", headers, quiet=True) as server:
        yield server


@contextlib.contextmanager
def terminado(peers_bin: Path) -> Iterator[Server]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [str(peers_bin / "python"), "-m", "bench.terminado_app", str(port)]
    with running(argv, dict(os.environ), url, "/healthz", {}) as server:
        yield server


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of the process itself (not its reaped children), from /proc."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    # After the command name: state is field 3, utime 14 and stime 15 (1-based, man 5 proc).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
