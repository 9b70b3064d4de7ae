"""Foreground calls at an agent's pace: `true`, back to back and with a pause before each call,
on shellgate with the shell started ahead (`spawn_ahead`, the default with a cgroup backend)
and without it, and on SWE-ReX `/execute`, interleaved call by call in the same run.

    .venv/bin/python -m bench.paced [--calls 60] [--pauses 0,0.1,0.5]

Why: an agent calls at the pace of its model, not back to back, and on a cgroup host each
spawn that moves a process into its cgroups after a quiet moment waits for an RCU grace period
(docs/operations.md, "Spawn ahead"). Prints, per pause, the median (and p90) of each subject
and the ratios; the server-side `wall_time_ms` (spawn to exit) shows where the time went.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Iterator

import httpx

from bench import servers


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


@contextlib.contextmanager
def subjects(with_swerex: bool) -> Iterator[dict[str, tuple[httpx.Client, str]]]:
    with contextlib.ExitStack() as stack:
        found: dict[str, tuple[httpx.Client, str]] = {}
        for name, ahead in (("spawn ahead", "true"), ("spawn on request", "false")):
            server = stack.enter_context(servers.shellgate(spawn_ahead=ahead))
            client = httpx.Client(base_url=server.base_url, headers=server.headers, timeout=30)
            found[name] = (stack.enter_context(client), "/v1/executions")
        if with_swerex:
            peer = stack.enter_context(servers.swerex(servers.ensure_peers_venv()))
            client = httpx.Client(base_url=peer.base_url, headers=peer.headers, timeout=30)
            found["SWE-ReX"] = (stack.enter_context(client), "/execute")
        yield found


def call(client: httpx.Client, path: str) -> tuple[float, float | None]:
    body = {"command": "true", **({"shell": True} if path == "/execute" else {})}
    started = time.perf_counter()
    response = client.post(path, json=body)
    elapsed = (time.perf_counter() - started) * 1000
    response.raise_for_status()
    wall = response.json().get("wall_time_ms") if path == "/v1/executions" else None
    return elapsed, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--pauses", default="0,0.1,0.5", help="seconds before each call")
    parser.add_argument("--no-swerex", action="store_true")
    args = parser.parse_args()
    pauses = [float(value) for value in args.pauses.split(",")]
    with subjects(not args.no_swerex) as found:
        for client, path in found.values():
            for _ in range(5):
                call(client, path)
        for pause in pauses:
            samples: dict[str, list[float]] = {name: [] for name in found}
            walls: dict[str, list[float]] = {name: [] for name in found}
            for _ in range(args.calls):
                for name, (client, path) in found.items():
                    time.sleep(pause)
                    elapsed, wall = call(client, path)
                    samples[name].append(elapsed)
                    if wall is not None:
                        walls[name].append(wall)
            print(f"pause {pause:g} s before each call ({args.calls} calls each):")
            for name, values in samples.items():
                wall_note = (
                    f", wall_time_ms {statistics.median(walls[name]):.2f}" if walls[name] else ""
                )
                print(
                    f"  {name:17} median {statistics.median(values):6.2f} ms, "
                    f"p90 {percentile(values, 0.9):6.2f} ms{wall_note}"
                )
            ahead = statistics.median(samples["spawn ahead"])
            for other in ("spawn on request", "SWE-ReX"):
                if other in samples:
                    ratio = ahead / statistics.median(samples[other])
                    print(f"  ratio spawn ahead / {other}: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
