"""Live-edge rows, this tree against another checkout in the same run (bench/PROFILE.md):

    .venv/bin/python -m bench.ab_live --baseline DIR [--rounds 3] [--keystrokes 150]

`DIR`: `git archive main | tar -x -C DIR`. Per round, both servers start afresh; the PTY
keystroke echo alternates this tree, the baseline and terminado key by key (as `make bench`
does), and the pipe and PTY streams run the baseline and this tree in rotating order, each next
to its floor. Prints per-round medians and the median of per-round ratios. Loopback only;
every loop is bounded by a count or a deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

import httpx
from websockets.asyncio.client import connect

from bench import servers
from bench.profile_session import baseline_server
from bench.programs import ECHO_PROGRAM
from bench.sidebyside import (
    KEYS,
    bounded,
    frames_until,
    ms_since,
    pipe_floor,
    pty_floor,
    shellgate_stream,
    shellgate_text,
    terminado_text,
)


async def echo_round(
    ours: servers.Server, base: servers.Server, terminado: servers.Server, keystrokes: int
) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {"this tree": [], "baseline": [], "terminado": []}
    urls = {}
    for name, server in (("this tree", ours), ("baseline", base)):
        async with httpx.AsyncClient(base_url=server.base_url, headers=server.headers) as client:
            body = {"command": ECHO_PROGRAM, "pty": True, "async": True}
            execution_id = (await client.post("/v1/executions", json=body)).json()["id"]
        ws_base = server.base_url.replace("http://", "ws://")
        urls[name] = f"{ws_base}/v1/executions/{execution_id}/stream"
    terminado_url = f"{terminado.base_url.replace('http://', 'ws://')}/echo"
    async with (
        connect(urls["this tree"], additional_headers=ours.headers) as a,
        connect(urls["baseline"], additional_headers=base.headers) as b,
        connect(terminado_url) as term,
    ):
        for ws in (a, b):
            await frames_until(ws, "READY", shellgate_text)
        await frames_until(term, "READY", terminado_text)
        for index in range(keystrokes + 10):
            key = KEYS[index % len(KEYS)]
            for name, ws in (("this tree", a), ("baseline", b)):
                started = time.perf_counter()
                await ws.send(json.dumps({"type": "input", "data": key}))
                await frames_until(ws, key, shellgate_text)
                if index >= 10:
                    samples[name].append(ms_since(started))
            started = time.perf_counter()
            await term.send(json.dumps(["stdin", key]))
            await frames_until(term, key, terminado_text)
            if index >= 10:
                samples["terminado"].append(ms_since(started))
        for ws in (a, b):
            await ws.send(json.dumps({"type": "signal", "signal": "TERM"}))
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keystrokes", type=int, default=150)
    parser.add_argument("--pipe-bytes", type=int, default=100_000_000)
    parser.add_argument("--pty-bytes", type=int, default=20_000_000)
    args = parser.parse_args()
    peers_bin = servers.ensure_peers_venv()
    ratios: dict[str, list[float]] = {}
    for index in range(args.rounds):
        with (
            servers.shellgate(auto_background_ms="30000", max_jobs="64") as ours,
            baseline_server(args.baseline) as base,
            servers.terminado(peers_bin) as terminado,
        ):
            assert base is not None
            echo = asyncio.run(echo_round(ours, base, terminado, args.keystrokes))
            medians = {name: statistics.median(values) for name, values in echo.items()}
            line = ", ".join(f"{name} {value:.3f}" for name, value in medians.items())
            print(f"round {index + 1}: echo median ms: {line}", flush=True)
            ratios.setdefault("echo this/baseline", []).append(
                medians["this tree"] / medians["baseline"]
            )
            ratios.setdefault("echo this/terminado", []).append(
                medians["this tree"] / medians["terminado"]
            )
            ratios.setdefault("echo baseline/terminado", []).append(
                medians["baseline"] / medians["terminado"]
            )
            order = [("this tree", ours), ("baseline", base)]
            order = order[index % 2 :] + order[: index % 2]
            for pty, size, floor in (
                (False, args.pipe_bytes, pipe_floor),
                (True, args.pty_bytes, pty_floor),
            ):
                kind = "PTY" if pty else "pipe"
                rates = {"floor": floor(size)}
                cpu: dict[str, float] = {}
                for name, server in order:
                    before = servers.cpu_seconds(server.pid)
                    rates[name] = bounded(shellgate_stream(server, size, pty=pty))
                    # Server CPU per MB: much less sensitive to other load than the rate.
                    cpu[name] = (servers.cpu_seconds(server.pid) - before) * 1000 / (size / 1e6)
                line = ", ".join(f"{name} {value:.1f}" for name, value in rates.items())
                line += "; server CPU ms/MB: "
                line += ", ".join(f"{name} {value:.2f}" for name, value in cpu.items())
                print(f"round {index + 1}: {kind} stream MB/s: {line}", flush=True)
                for name in ("this tree", "baseline"):
                    ratios.setdefault(f"{kind} {name}/floor", []).append(
                        rates[name] / rates["floor"]
                    )
                ratios.setdefault(f"{kind} CPU per MB this/baseline", []).append(
                    cpu["this tree"] / cpu["baseline"]
                )
    print("median of per-round ratios:")
    for name, values in ratios.items():
        print(f"  {name}: x{statistics.median(values):.2f}")


if __name__ == "__main__":
    main()
