"""Foreground round trip of `true` through HTTP, side by side with the yardstick (a minimal
FastAPI endpoint running the same command with asyncio), and the server's memory as the output
grows.

    .venv/bin/python -m bench.bench_foreground [--rounds 300]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import httpx

from bench.servers import TOKEN, rss_kib, shellgate, yardstick


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def summary(samples_ms: list[float]) -> dict[str, float]:
    return {
        "median_ms": round(statistics.median(samples_ms), 3),
        "p99_ms": round(percentile(samples_ms, 0.99), 3),
    }


def latency(rounds: int) -> dict[str, object]:
    with shellgate(auto_background_ms="30000") as ours, yardstick() as base:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with (
            httpx.Client(base_url=ours.base_url, headers=headers) as sg,
            httpx.Client(base_url=base.base_url) as ys,
        ):

            def call_shellgate() -> None:
                response = sg.post("/v1/executions", json={"command": "true"})
                assert response.status_code == 200 and response.json()["exit_code"] == 0

            def call_yardstick() -> None:
                response = ys.post("/run", json={"command": "true"})
                assert response.status_code == 200 and response.json()["exit_code"] == 0

            for _ in range(30):  # warm up both: imports, connection pools, SQLite pages
                call_shellgate()
                call_yardstick()
            ours_ms: list[float] = []
            base_ms: list[float] = []
            # Alternate so that noise from the rest of the machine hits both alike.
            for _ in range(rounds):
                for call, samples in ((call_shellgate, ours_ms), (call_yardstick, base_ms)):
                    started = time.perf_counter()
                    call()
                    samples.append((time.perf_counter() - started) * 1000)
    ours_summary, base_summary = summary(ours_ms), summary(base_ms)
    return {
        "rounds": rounds,
        "shellgate": ours_summary,
        "yardstick": base_summary,
        "median_ratio": round(ours_summary["median_ms"] / base_summary["median_ms"], 3),
        "p99_ratio": round(ours_summary["p99_ms"] / base_summary["p99_ms"], 3),
    }


def memory() -> dict[str, object]:
    """Peak RSS of the server after outputs of growing size: it must stay flat."""
    sizes_mb = [1, 10, 100, 400]
    results = []
    with shellgate(auto_background_ms="0") as ours:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=ours.base_url, headers=headers, timeout=600) as client:
            client.post("/v1/executions", json={"command": "true"})
            idle_kib = rss_kib(ours.pid, "VmHWM")
            for size in sizes_mb:
                command = f"head -c {size * 1_000_000} /dev/zero | tr '\\0' 'x' | fold -w 99"
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--skip-memory", action="store_true")
    args = parser.parse_args()
    report: dict[str, object] = {"latency": latency(args.rounds)}
    if not args.skip_memory:
        report["memory"] = memory()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
