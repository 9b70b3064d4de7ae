"""The `cap` row of `make bench`: 1 GB of output over the artifact cap (256 MiB, the default)
against the same 1 GB on a server whose cap is above it (nothing truncated), each round in
rotated order: time from the foreground submit to its answer (which comes once the execution
is `completed`) and the whole tree's CPU over the call."""

from __future__ import annotations

import time

import httpx

from bench import servers

GIGABYTE = 1_000_000_000


def one_call(size: int, cap: int | None) -> tuple[float, float]:
    """(seconds, CPU seconds of the whole tree) for one foreground call writing `size` bytes."""
    settings = {"auto_background_ms": "600000"}
    if cap is not None:
        settings["artifact_max_bytes"] = str(cap)
    body = {"command": f"head -c {size} /dev/zero", "timeout": 600}
    with (
        # `port` and `data_dir` named: otherwise mypy takes the dict's keys for them too.
        servers.shellgate(port=None, data_dir=None, **settings) as server,
        httpx.Client(base_url=server.base_url, headers=server.headers, timeout=600) as client,
    ):
        client.post("/v1/executions", json={"command": "echo warm"}).raise_for_status()
        time.sleep(0.3)
        before = server.tree_cpu_seconds()
        started = time.perf_counter()
        response = client.post("/v1/executions", json=body)
        elapsed = time.perf_counter() - started
        result = response.json()
        if response.status_code != 200 or result.get("state") != "completed":
            raise RuntimeError(f"the {size}-byte call did not complete: {response.text[:300]}")
        if result.get("total_bytes", size) != size:
            raise RuntimeError(f"{result.get('total_bytes')} bytes, not {size}")
        return elapsed, server.tree_cpu_seconds() - before
