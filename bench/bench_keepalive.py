"""Keep-alive race: clients that reuse an idle connection just as the server closes it see a
read error and no response. 200 clients (httpx defaults: idle connections kept 5 s), each
making requests separated by idle gaps around 5 s, against the server with uvicorn's default
5 s keep-alive and with shellgate's default (`SHELLGATE_KEEPALIVE_SECONDS`, 75 s).

    .venv/bin/python -m bench.bench_keepalive [--clients 200] [--requests 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time

import httpx

from bench.servers import TOKEN, shellgate


async def one_client(base_url: str, requests: int, seed: int) -> dict[str, int]:
    generator = random.Random(seed)
    counts = {"ok": 0, "read_errors": 0, "other_errors": 0}
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30) as client:
        for index in range(requests):
            if index:
                # Idle for about the server's old keep-alive (5 s): the close and the reuse meet.
                await asyncio.sleep(generator.uniform(4.95, 5.05))
            try:
                response = await client.get("/v1/info")
                counts["ok" if response.status_code == 200 else "other_errors"] += 1
            except (httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError):
                counts["read_errors"] += 1
            except httpx.HTTPError:
                counts["other_errors"] += 1
    return counts


async def hammer(base_url: str, clients: int, requests: int) -> dict[str, int]:
    results = await asyncio.gather(
        *(one_client(base_url, requests, seed) for seed in range(clients))
    )
    return {key: sum(result[key] for result in results) for key in results[0]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--requests", type=int, default=4)
    args = parser.parse_args()
    report: dict[str, object] = {"clients": args.clients, "requests_each": args.requests}
    for keepalive in ("5", "75"):
        with shellgate(keepalive_seconds=keepalive) as server:
            started = time.monotonic()
            counts = asyncio.run(hammer(server.base_url, args.clients, args.requests))
            report[f"keepalive_{keepalive}s"] = {
                **counts,
                "seconds": round(time.monotonic() - started, 1),
            }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
