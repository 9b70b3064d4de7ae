"""The live output stream path, this tree against another checkout in the same run
(bench/PROFILE.md, "The stream path"):

    .venv/bin/python -m bench.ab_stream --baseline DIR [--rounds 3] [--only pipe|viewers]

`DIR`: `git archive main | tar -x -C DIR`. Per round both servers start afresh, then:

- pipe: the asyncio read floor, this tree and the baseline, in rotating order, each streaming
  `head -c N /dev/zero | base64 -w 0` to one viewer (`bench.sidebyside.shellgate_stream`);
- viewers: `/healthz` p50 of each server while 50 WebSocket viewers follow commands writing
  random bytes (`bench.sidebyside.viewers_healthz`), the minimal app probed in the same
  seconds; the ratio is the server's p50 over the minimal app's.

Prints per-round figures and the median of per-round ratios. Loopback only; every loop is
bounded by a count or a deadline.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from bench import servers
from bench.profile_session import baseline_server
from bench.sidebyside import (
    asyncio_pipe_floor,
    bounded,
    shellgate_stream,
    viewers_healthz,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pipe-bytes", type=int, default=200_000_000)
    parser.add_argument("--only", choices=("pipe", "viewers"), action="append")
    args = parser.parse_args()
    chosen = args.only or ["pipe", "viewers"]
    ratios: dict[str, list[float]] = {}
    for index in range(args.rounds):
        with (
            servers.shellgate(auto_background_ms="30000", max_jobs="64") as ours,
            baseline_server(args.baseline) as base,
            servers.yardstick() as minimal,
        ):
            assert base is not None
            # (name, server, binary): the baseline has no binary format (it ignores the
            # parameter and sends JSON frames, which the clients here read too).
            order = [("this tree", ours, False), ("this tree binary", ours, True)]
            order += [("baseline", base, False)]
            order = order[index % 3 :] + order[: index % 3]
            if "pipe" in chosen:
                rates = {"asyncio floor": bounded(asyncio_pipe_floor(args.pipe_bytes))}
                cpu: dict[str, float] = {}
                for name, server, binary in order:
                    before = server.tree_cpu_seconds()
                    stream = shellgate_stream(server, args.pipe_bytes, pty=False, binary=binary)
                    rates[name] = bounded(stream)
                    # The whole tree's CPU per MB (the producer's included, alike on both).
                    cpu[name] = (
                        (server.tree_cpu_seconds() - before) * 1000 / (args.pipe_bytes / 1e6)
                    )
                line = ", ".join(f"{name} {value:.1f}" for name, value in rates.items())
                line += "; tree CPU ms/MB: " + ", ".join(f"{n} {v:.2f}" for n, v in cpu.items())
                for name in ("this tree", "this tree binary"):
                    ratios.setdefault(f"pipe tree CPU per MB {name}/baseline", []).append(
                        cpu[name] / cpu["baseline"]
                    )
                print(f"round {index + 1}: pipe stream MB/s: {line}", flush=True)
                for name in ("this tree", "this tree binary", "baseline"):
                    ratios.setdefault(f"pipe {name}/asyncio floor", []).append(
                        rates[name] / rates["asyncio floor"]
                    )
            if "viewers" in chosen:
                for name, server, binary in order:
                    ours_ms, minimal_ms = bounded(viewers_healthz(server, minimal, binary), 180)
                    p50, minimal_p50 = statistics.median(ours_ms), statistics.median(minimal_ms)
                    print(
                        f"round {index + 1}: /healthz p50 under 50 viewers: {name} {p50:.2f} ms"
                        f" ({len(ours_ms)} probes), minimal app {minimal_p50:.2f} ms",
                        flush=True,
                    )
                    ratios.setdefault(f"viewers {name}/minimal app", []).append(p50 / minimal_p50)
    print("median of per-round ratios (lowest-highest):")
    for name, values in ratios.items():
        print(f"  {name}: x{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})")


if __name__ == "__main__":
    main()
