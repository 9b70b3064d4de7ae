"""PTY keystroke echo latency over the WebSocket stream, side by side with the same echo on a
PTY driven directly in-process (ptyprocess, no server: the floor).

    .venv/bin/python -m bench.bench_pty_echo [--keystrokes 500]

The PTY runs `stty raw -echo; exec cat`, so each typed byte comes back only once the program
has read it and written it out (the terminal's own echo is off). Through shellgate: an
`{"type": "input"}` frame with one character, timed until the output frame carrying it
arrives. Directly: one `write` to the PTY master, timed until the byte can be read back.
Keystrokes alternate between the two, so that noise from the rest of the machine hits both
alike. The server is a separate process (`bench.servers.shellgate`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import select
import statistics
import string
import time
from typing import Any

import httpx
from ptyprocess import PtyProcess
from websockets.asyncio.client import ClientConnection, connect

from bench.servers import TOKEN, shellgate

HEADERS = {"Authorization": f"Bearer {TOKEN}"}
ECHO_PROGRAM = "stty raw -echo; echo READY; exec cat"
KEYS = string.ascii_letters + string.digits


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def summary(samples_ms: list[float]) -> dict[str, float]:
    return {
        "median_ms": round(statistics.median(samples_ms), 3),
        "p99_ms": round(percentile(samples_ms, 0.99), 3),
        "max_ms": round(max(samples_ms), 3),
    }


class DirectPty:
    """The floor: the same program on a PTY this process drives itself."""

    def __init__(self) -> None:
        self.pty = PtyProcess.spawn(["bash", "-c", ECHO_PROGRAM], dimensions=(40, 120))
        self._read_until(b"READY")

    def _read_until(self, needle: bytes) -> None:
        seen = b""
        deadline = time.monotonic() + 10
        while needle not in seen:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {needle!r} from the direct PTY")
            ready, _, _ = select.select([self.pty.fd], [], [], 1)
            if ready:
                seen += os.read(self.pty.fd, 4096)

    def echo(self, key: bytes) -> float:
        started = time.perf_counter()
        os.write(self.pty.fd, key)
        self._read_until(key)
        return (time.perf_counter() - started) * 1000

    def close(self) -> None:
        self.pty.terminate(force=True)


async def read_until(ws: ClientConnection, needle: str) -> None:
    seen = ""
    while needle not in seen:
        frame: dict[str, Any] = json.loads(await ws.recv())
        if frame["type"] == "output":
            seen += frame["data"]
        elif frame["type"] in ("exit", "error"):
            raise RuntimeError(f"unexpected frame {frame}")


async def measure(base_url: str, keystrokes: int) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=base_url, headers=HEADERS) as client:
        response = await client.post(
            "/v1/executions", json={"command": ECHO_PROGRAM, "pty": True, "async": True}
        )
        execution_id = response.json()["id"]
        url = f"{base_url.replace('http://', 'ws://')}/v1/executions/{execution_id}/stream"
        direct = DirectPty()
        ours: list[float] = []
        floor: list[float] = []
        try:
            async with connect(url, additional_headers=HEADERS) as ws:
                await read_until(ws, "READY")
                for index in range(keystrokes + 20):
                    key = KEYS[index % len(KEYS)]
                    started = time.perf_counter()
                    await ws.send(json.dumps({"type": "input", "data": key}))
                    await read_until(ws, key)
                    elapsed = (time.perf_counter() - started) * 1000
                    direct_elapsed = direct.echo(key.encode())
                    if index >= 20:  # the first ones warm up both paths
                        ours.append(elapsed)
                        floor.append(direct_elapsed)
                await ws.send(json.dumps({"type": "signal", "signal": "TERM"}))
        finally:
            direct.close()
    ours_summary, floor_summary = summary(ours), summary(floor)
    return {
        "keystrokes": keystrokes,
        "program": ECHO_PROGRAM,
        "websocket": ours_summary,
        "direct_pty": floor_summary,
        "median_ratio": round(ours_summary["median_ms"] / floor_summary["median_ms"], 1),
        "median_added_ms": round(ours_summary["median_ms"] - floor_summary["median_ms"], 3),
        "target_median_ms": 5,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keystrokes", type=int, default=500)
    args = parser.parse_args()
    with shellgate() as server:
        report = asyncio.run(measure(server.base_url, args.keystrokes))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
