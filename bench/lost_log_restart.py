"""Restart after a crash with long lost logs (issue 25): launch → `/healthz` answering, with
4 lost logs of 100 MB each against the same server restarted with none, in the same run; and
launch → `/readyz` saying `recovery: done`. Start-up should not grow with the lost logs.

    .venv/bin/python -m bench.lost_log_restart [--logs 4] [--mb 100]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from app.output.artifact_log import artifact_log_path

TOKEN = "bench-admin-token-0123456789"


def launch(data: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SHELLGATE_")}
    env.update(
        SHELLGATE_DATA_DIR=str(data),
        SHELLGATE_WORKSPACE=str(data.parent / "workspace"),
        SHELLGATE_TOKENS=f"bench:admin:{TOKEN}",
        SHELLGATE_MAX_JOBS="16",
    )
    (data.parent / "workspace").mkdir(exist_ok=True)
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "app", "serve", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def until(probe: object, within: float = 600) -> float:
    started = time.monotonic()
    while time.monotonic() - started < within:
        try:
            if probe():  # type: ignore[operator]
                return time.monotonic() - started
        except httpx.TransportError:
            pass
        time.sleep(0.01)
    raise SystemExit("timed out")


def restart_figures(root: Path, logs: int, megabytes: int, port: int) -> tuple[float, float]:
    data = root / "data"
    url = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {TOKEN}"}
    server = launch(data, port, root / "server.log")
    until(lambda: httpx.get(f"{url}/healthz").status_code == 200)
    size = megabytes * 1_000_000
    for _ in range(logs):
        command = f"yes 0123456789abcdef | head -c {size}; sleep 600"
        job = httpx.post(
            f"{url}/v1/executions", json={"command": command, "async": True}, headers=headers
        ).json()
        path = artifact_log_path(data / "artifacts", job["id"])
        until(lambda path=path: path.exists() and path.stat().st_size >= size)
    server.send_signal(signal.SIGKILL)  # our own server, by its pid
    server.wait()
    launched = time.monotonic()
    server = launch(data, port, root / "server.log")
    try:
        until(lambda: httpx.get(f"{url}/healthz").status_code == 200)
        healthz = time.monotonic() - launched
        until(lambda: httpx.get(f"{url}/readyz").json().get("recovery") == "done")
        recovered = time.monotonic() - launched
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)
    return healthz, recovered


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--logs", type=int, default=4)
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--port", type=int, default=18_765)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as base, tempfile.TemporaryDirectory() as lost:
        base_healthz, _ = restart_figures(Path(base), 0, arguments.mb, arguments.port)
        lost_healthz, recovered = restart_figures(
            Path(lost), arguments.logs, arguments.mb, arguments.port
        )
    print(f"restart, no lost log:      /healthz after {base_healthz:.2f} s")
    print(
        f"restart, {arguments.logs} x {arguments.mb} MB lost: /healthz after "
        f"{lost_healthz:.2f} s (x{lost_healthz / base_healthz:.2f} the baseline), "
        f"recovery done after {recovered:.2f} s"
    )


if __name__ == "__main__":
    main()
