"""Streaming throughput: a 200 MB output watched live through the WebSocket stream, side by side
with reading the same command's stdout straight from a pipe (the floor: what the machine can do
with no server in between).

    .venv/bin/python -m bench.bench_stream [--megabytes 200] [--rounds 2]

The server is a separate process (`bench.servers.shellgate`) so that the viewer's own CPU does
not share a GIL with it. The viewer connects from offset 0 right after the `async` submit and
counts the bytes its frames carry until the exit frame; the clock runs from the submit to the
exit frame. A third figure replays the finished log (no producer), which isolates the
stream's own cost.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import fcntl
import json
import os
import statistics
import subprocess
import time
from typing import Any

import httpx
from websockets.asyncio.client import connect

from app.process import PIPE_SIZE, READ_SIZE
from bench.servers import TOKEN, shellgate

HEADERS = {"Authorization": f"Bearer {TOKEN}"}


def command_for(megabytes: int) -> str:
    return f"head -c {megabytes * 1_000_000} /dev/zero | tr '\\0' 'a' | fold -w 100"


def floor_run(command: str) -> tuple[int, float]:
    """Bytes and seconds reading the command's stdout from a pipe as the server's pump does
    (the same pipe size and read size), with nothing done to the bytes."""
    started = time.perf_counter()
    process = subprocess.Popen(["bash", "-c", command], stdout=subprocess.PIPE)
    assert process.stdout is not None
    fd = process.stdout.fileno()
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
    total = 0
    while chunk := os.read(fd, READ_SIZE):
        total += len(chunk)
    process.wait()
    return total, time.perf_counter() - started


async def watch(ws_url: str, execution_id: str, deflate: bool) -> tuple[int, int, dict[str, Any]]:
    """Bytes and frames received until the exit frame, and the exit frame."""
    total = frames = 0
    url = f"{ws_url}/v1/executions/{execution_id}/stream?offset=0"
    async with connect(
        url,
        additional_headers=HEADERS,
        max_size=None,
        compression="deflate" if deflate else None,
    ) as ws:
        async for message in ws:
            frame = json.loads(message)
            if frame["type"] == "output":
                frames += 1
                data = frame["data"]
                if frame.get("encoding") == "base64":
                    total += len(base64.b64decode(data))
                else:
                    total += len(data.encode())
            elif frame["type"] == "exit":
                return total, frames, frame
    raise RuntimeError("the stream ended without an exit frame")


async def stream_run(base_url: str, command: str, deflate: bool) -> tuple[int, int, float, str]:
    ws_url = base_url.replace("http://", "ws://")
    async with httpx.AsyncClient(base_url=base_url, headers=HEADERS, timeout=600) as client:
        started = time.perf_counter()
        response = await client.post("/v1/executions", json={"command": command, "async": True})
        execution_id = response.json()["id"]
        total, frames, last = await watch(ws_url, execution_id, deflate)
        elapsed = time.perf_counter() - started
    assert last["state"] == "completed", last
    return total, frames, elapsed, execution_id


async def replay_run(base_url: str, execution_id: str, deflate: bool) -> tuple[int, float]:
    started = time.perf_counter()
    total, _, _ = await watch(base_url.replace("http://", "ws://"), execution_id, deflate)
    return total, time.perf_counter() - started


def mb_per_s(total: int, seconds: float) -> float:
    return round(total / seconds / 1e6, 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--megabytes", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    command = command_for(args.megabytes)
    # fold puts a newline between 100-byte lines, none after the last.
    expected = args.megabytes * 1_000_000 * 101 // 100 - 1
    floor_rates: list[float] = []
    rates: dict[str, list[float]] = {
        f"{kind}_{mode}": [] for kind in ("live", "replay") for mode in ("deflate", "plain")
    }
    frames_seen = 0
    # The default server does not negotiate compression (SHELLGATE_WS_COMPRESSION=false); a
    # second one with it on measures what a browser's default offer costs when it is accepted.
    with shellgate() as plain_server, shellgate(ws_compression="true") as deflate_server:
        floor_run("true")  # warm the page cache and the shell
        for _ in range(args.rounds):
            # Alternate, so that noise from the rest of the machine hits all alike.
            floor_total, floor_seconds = floor_run(command)
            assert floor_total == expected, floor_total
            floor_rates.append(mb_per_s(floor_total, floor_seconds))
            for mode in ("deflate", "plain"):
                deflate = mode == "deflate"
                server = deflate_server if deflate else plain_server
                total, frames_seen, seconds, execution_id = asyncio.run(
                    stream_run(server.base_url, command, deflate)
                )
                assert total == expected, total
                rates[f"live_{mode}"].append(mb_per_s(total, seconds))
                replayed, seconds = asyncio.run(replay_run(server.base_url, execution_id, deflate))
                assert replayed == expected, replayed
                rates[f"replay_{mode}"].append(mb_per_s(replayed, seconds))
    floor = statistics.median(floor_rates)
    report: dict[str, Any] = {
        "command": command,
        "output_bytes": expected,
        "rounds": args.rounds,
        "frames_per_run": frames_seen,
        "pipe_floor_mb_s": floor_rates,
        # deflate: the client offers permessage-deflate and a server with
        # SHELLGATE_WS_COMPRESSION=true accepts it; plain: the default server, no compression.
        **{f"websocket_{key}_mb_s": values for key, values in rates.items()},
        **{
            f"{key}_vs_floor_ratio": round(statistics.median(values) / floor, 3)
            for key, values in rates.items()
        },
        "target_ratio": 0.4,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
