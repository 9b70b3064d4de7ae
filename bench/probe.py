"""A `/healthz` prober in a process of its own, so that what it measures is the server's
answer, not the load generator's event loop: `python -m bench.probe URL SECONDS` prints the
latencies (ms) as a JSON list, one probe every 20 ms."""

from __future__ import annotations

import json
import sys
import time

import httpx


def main() -> None:
    url, seconds = sys.argv[1], float(sys.argv[2])
    latencies: list[float] = []
    deadline = time.monotonic() + seconds
    with httpx.Client(timeout=30) as client:
        while time.monotonic() < deadline:
            started = time.perf_counter()
            response = client.get(url)
            latencies.append((time.perf_counter() - started) * 1000)
            if response.status_code != 200:
                raise SystemExit(f"{url} answered {response.status_code}")
            time.sleep(0.02)
    print(json.dumps(latencies))


if __name__ == "__main__":
    main()
