"""Start-up A/B: `python -m app serve` from two checkouts, alternating, under the same load.

    git -C /work/main archive main | tar -x -C /tmp/main-copy   # A, not touching main's tree
    .venv/bin/python -m bench.startup /tmp/main-copy . --rounds 5 [--source] [--swerex BIN]

Per round and checkout, once on a fresh data directory (migrations due, as `make bench` starts)
and again on the directory the first start left (schema current): seconds from spawn to the
first `/healthz` 200 and the CPU seconds the process (and the migration child it reaped) used
by then, the idle RSS a second later, the first foreground call's latency (`echo hi`, which
pays whatever the start left for later) and the second's. Each checkout runs with its own
`.venv/bin/python` if it has one, else this one (the same dependencies). The checkouts are
byte-compiled first, as an install is (`bench/servers.py`, `compile_bytecode`), unless
`--source` asks for every start to compile from source (PYTHONDONTWRITEBYTECODE set, no
`__pycache__`: what `make bench` measured before it compiled). `--swerex` starts SWE-ReX's
`swerex-remote` in each round too (start and idle RSS).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench import servers
from bench.servers import TOKEN, compile_bytecode, free_port, rss_kib

HEADERS = {"Authorization": f"Bearer {TOKEN}"}


def _wait_ready(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.01)
    raise RuntimeError(f"{url} did not answer")


def cpu_with_reaped_children(pid: int) -> float:
    """User + system CPU of the process and of the children it waited for (man 5 proc)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return sum(int(field) for field in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def one_start(tree: Path, scratch: Path) -> dict[str, float]:
    port = free_port()
    env = {
        **os.environ,
        "SHELLGATE_HOST": "127.0.0.1",
        "SHELLGATE_PORT": str(port),
        "SHELLGATE_DATA_DIR": str(scratch / "data"),
        "SHELLGATE_WORKSPACE": str(scratch),
        "SHELLGATE_TOKENS": f"bench:admin:{TOKEN}",
        "SHELLGATE_LOG_LEVEL": "warning",
    }
    env.pop("VIRTUAL_ENV", None)
    url = f"http://127.0.0.1:{port}"
    started = time.perf_counter()
    own_python = tree / ".venv" / "bin" / "python"
    python = str(own_python) if own_python.exists() else sys.executable
    process = subprocess.Popen(
        [python, "-m", "app", "serve"],
        env=env,
        cwd=tree,
        start_new_session=True,
    )
    try:
        _wait_ready(url + "/healthz", process)
        figures = {"start_s": time.perf_counter() - started}
        # CPU seconds the start used: on a loaded machine the wall time mostly measures the wait.
        figures["start_cpu_s"] = cpu_with_reaped_children(process.pid)
        time.sleep(1.0)
        figures["idle_rss_mib"] = rss_kib(process.pid) / 1024
        began = time.perf_counter()
        answer = httpx.post(
            url + "/v1/executions", json={"command": "echo hi"}, headers=HEADERS, timeout=30
        )
        figures["first_call_ms"] = (time.perf_counter() - began) * 1000
        assert answer.status_code == 200, answer.text
        began = time.perf_counter()
        httpx.post(url + "/v1/executions", json={"command": "echo hi"}, headers=HEADERS, timeout=30)
        figures["second_call_ms"] = (time.perf_counter() - began) * 1000
        figures["rss_after_calls_mib"] = rss_kib(process.pid) / 1024
        return figures
    finally:
        servers.stop(process)


def swerex_start(swerex_remote: Path) -> dict[str, float]:
    """SWE-ReX's start and idle RSS, as `make bench` measures them (bench/servers.py)."""
    with servers.swerex(swerex_remote.parent) as server:
        figures = {"start_s": server.startup_s, "start_cpu_s": cpu_with_reaped_children(server.pid)}
        time.sleep(1.0)
        figures["idle_rss_mib"] = rss_kib(server.pid) / 1024
        return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("trees", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--source", action="store_true", help="no bytecode: compile each start")
    parser.add_argument("--swerex", type=Path, help="a swerex-remote to start alongside")
    args = parser.parse_args()
    for tree in args.trees:
        if args.source:
            for cache in [
                *tree.glob("app/**/__pycache__"),
                *tree.glob("migrations/**/__pycache__"),
            ]:
                shutil.rmtree(cache)
        else:
            compile_bytecode(tree)
    results: dict[str, dict[str, list[float]]] = {}
    for index in range(args.rounds):
        order = args.trees if index % 2 == 0 else list(reversed(args.trees))
        for tree in order:
            scratch = Path(tempfile.mkdtemp(prefix="startup-"))
            try:
                fresh = one_start(tree, scratch)
                again = one_start(tree, scratch)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            row = results.setdefault(str(tree), {})
            for prefix, figures in (("fresh ", fresh), ("again ", again)):
                for key, value in figures.items():
                    row.setdefault(prefix + key, []).append(value)
        if args.swerex is not None:
            for key, value in swerex_start(args.swerex).items():
                results.setdefault("SWE-ReX", {}).setdefault(key, []).append(value)
        print(f"round {index + 1} done, load {os.getloadavg()[0]:.1f}", flush=True)
    for tree, row in results.items():
        print(tree)
        for key, values in row.items():
            print(f"  {key:20} median {statistics.median(values):8.3f}  all {values}")


if __name__ == "__main__":
    main()
