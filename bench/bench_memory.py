"""The server's memory as the output grows: peak RSS after foreground outputs of 1 to 400 MB
must stay flat (the log is on disk, the answer keeps bounded windows).

    .venv/bin/python -m bench.bench_memory
"""

from __future__ import annotations

import json
import time

import httpx

from bench.programs import stream_program
from bench.servers import TOKEN, rss_kib, shellgate

SIZES_MB = [1, 10, 100, 400]


def memory() -> dict[str, object]:
    results = []
    with shellgate(auto_background_ms="0") as ours:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=ours.base_url, headers=headers, timeout=600) as client:
            client.post("/v1/executions", json={"command": "true"})
            idle_kib = rss_kib(ours.pid, "VmHWM")
            for size in SIZES_MB:
                command = stream_program(size * 1_000_000)
                started = time.perf_counter()
                body = client.post("/v1/executions", json={"command": command}).json()
                elapsed = time.perf_counter() - started
                results.append(
                    {
                        "output_mb": size,
                        "total_bytes": body["total_bytes"],
                        "inline_bytes": body["output_bytes"],
                        "peak_rss_kib": rss_kib(ours.pid, "VmHWM"),
                        "seconds": round(elapsed, 2),
                    }
                )
    return {
        "idle_peak_rss_kib": idle_kib,
        "runs": results,
        "peak_growth_ratio_400mb_vs_idle": round(results[-1]["peak_rss_kib"] / idle_kib, 3),
    }


if __name__ == "__main__":
    print(json.dumps(memory(), indent=2))
