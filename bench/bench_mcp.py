"""What the MCP endpoint costs over REST for the same command, on one loopback server.

    .venv/bin/python -m bench.bench_mcp [--rounds 300]

Side by side on one shellgate server (a separate process), each client connected once and
kept open, in alternating blocks so that machine noise hits all alike:
- `rest`: a foreground `POST /v1/executions` running `true` (the baseline);
- `mcp_modern`: the MCP `bash` tool with the same command through the SDK client in its default
  mode (protocol 2026-07-28: one stateless POST per call);
- `mcp_session`: the same through a session of the initialize handshake (protocol 2025-11-25,
  what most MCP clients speak today: each call answers on an SSE stream).
`connect_ms` is the time to open a client and list the tools (what an MCP client does once).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack

import httpx
import httpx2
from mcp.client.client import Client, ConnectMode
from mcp.client.streamable_http import streamable_http_client

from bench.servers import TOKEN, shellgate

BLOCK = 25
COMMAND = {"command": "true"}


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def summary(samples_ms: list[float]) -> dict[str, float]:
    return {
        "samples": len(samples_ms),
        "median_ms": round(statistics.median(samples_ms), 3),
        "p99_ms": round(percentile(samples_ms, 0.99), 3),
    }


async def open_mcp(stack: AsyncExitStack, base_url: str, mode: ConnectMode) -> Client:
    http = await stack.enter_async_context(
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
    )
    transport = streamable_http_client(f"{base_url}/mcp", http_client=http)
    return await stack.enter_async_context(Client(transport, mode=mode))


async def time_connect(base_url: str, mode: ConnectMode, rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        async with AsyncExitStack() as stack:
            client = await open_mcp(stack, base_url, mode)
            await client.list_tools()
            samples.append((time.perf_counter() - start) * 1000)
    return samples


async def measure(base_url: str, rounds: int) -> dict[str, object]:
    async with AsyncExitStack() as stack:
        rest = await stack.enter_async_context(
            httpx.AsyncClient(
                base_url=base_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60
            )
        )
        modern = await open_mcp(stack, base_url, "auto")
        session = await open_mcp(stack, base_url, "legacy")

        async def via_rest() -> None:
            response = await rest.post("/v1/executions", json=COMMAND)
            assert response.status_code == 200, response.text

        async def via_mcp(client: Client) -> None:
            result = await client.call_tool("bash", COMMAND)
            assert not result.is_error, result

        calls: dict[str, Callable[[], Awaitable[None]]] = {
            "rest": via_rest,
            "mcp_modern": lambda: via_mcp(modern),
            "mcp_session": lambda: via_mcp(session),
        }
        for call in calls.values():  # warm up connections, caches, the policy
            for _ in range(5):
                await call()
        samples: dict[str, list[float]] = {name: [] for name in calls}
        while len(samples["rest"]) < rounds:
            for name, call in calls.items():
                for _ in range(BLOCK):
                    start = time.perf_counter()
                    await call()
                    samples[name].append((time.perf_counter() - start) * 1000)
    figures = {name: summary(values) for name, values in samples.items()}
    baseline = figures["rest"]["median_ms"]
    return {
        "round_trip": figures,
        "median_ratio_vs_rest": {
            name: round(figure["median_ms"] / baseline, 2) for name, figure in figures.items()
        },
        "connect_ms": {
            "mcp_modern": summary(await time_connect(base_url, "auto", 20)),
            "mcp_session": summary(await time_connect(base_url, "legacy", 20)),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    with shellgate() as server:
        results = asyncio.run(measure(server.base_url, args.rounds))
    print(json.dumps({"bench": "mcp", "rounds": args.rounds, **results}, indent=2))


if __name__ == "__main__":
    main()
