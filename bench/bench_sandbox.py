"""What the sandbox costs a call (docs/sandbox.md#cost): a foreground `echo hi` against two
servers started alike, one with the sandbox on (the default) and one with
`SHELLGATE_SANDBOX=off`, calls alternating one by one, in the same run.

    .venv/bin/python -m bench.bench_sandbox [--calls 300] [--confinement rlimit]

Reports the median and p99 of each, the ratio of the medians, and the CPU per call of each
server's whole tree over the measured calls, as `make bench` reads it (`bench/tree_cpu.py`: a
cgroup of its own per server where one can be made), from the first measured call to a
settle after the last: a spawn-ahead server builds the next call's standby (bwrap's sandbox
among it) after it answered, outside the call's own window, where a per-call window (as here
until 2026-12-06 18:00Z) missed it whenever the other server's call ran meanwhile. Before
2026-12-06 it also read only the
server's utime + stime and its reaped children's from `/proc/<pid>/stat`, which leaves out
bwrap's init in each sandbox: the server never reaps it (the system's init does), so its
work, the namespaces' end among it, was not counted. Also the server process's own CPU per
call (no child: what the sandbox costs the server itself, its argv and checks), as a third
ratio. Target: the sandbox adds at most ×1.15 to the median and to the CPU.

    .venv/bin/python -m bench.bench_sandbox --calls 150 --baseline DIR

`DIR`: another checkout (`git archive main | tar -x -C DIR`), run with this virtualenv: its
two servers (on, off) join the same run, the four taking each call's turn in a rotating order
(every server in every position alike), and each tree's ratios are reported side by side.

    .venv/bin/python -m bench.bench_sandbox --calls 150 --block 25 [--pause 0.05]

`--block N`: N calls in a row to one server before the next server's turn (back to back on
each: its next standby is built while its next call runs); `--pause S`: S seconds before each
call (an agent's pace: the standby is built between calls).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from bench import servers
from bench.servers import TOKEN
from bench.table import percentile

WARM_UP = 20
# Long enough for a standby started after an answer to be built and waiting.
SETTLE_S = 1.0
TARGET = 1.15


@contextlib.contextmanager
def started(tree: Path | None, sandbox: str, confinement: str) -> Iterator[servers.Server]:
    """A server of this checkout, or of `tree` (its `app` package: `python -m app` imports
    the one of the directory it starts in)."""
    saved = servers.BENCH_DIR
    if tree is not None:
        servers.BENCH_DIR = tree / "bench"  # `servers.running` starts it in the parent
    try:
        with servers.shellgate(sandbox=sandbox, confinement=confinement) as server:
            servers.BENCH_DIR = saved
            yield server
    finally:
        servers.BENCH_DIR = saved


def measure(
    calls: int,
    confinement: str = "auto",
    baseline: Path | None = None,
    block: int = 1,
    pause: float = 0.0,
) -> dict[str, object]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    trees: dict[str, Path | None] = {"this": None}
    if baseline is not None:
        trees["baseline"] = baseline
    names = [(tree, sandbox) for tree in trees for sandbox in ("on", "off")]
    with contextlib.ExitStack() as stack:
        running: dict[tuple[str, str], tuple[httpx.Client, servers.Server]] = {}
        for tree, sandbox in names:
            server = stack.enter_context(started(trees[tree], sandbox, confinement))
            client = stack.enter_context(httpx.Client(base_url=server.base_url, headers=headers))
            enforced = client.get("/v1/info").json()["sandbox"]["enforced"]
            assert enforced is (sandbox == "on"), (tree, sandbox, enforced)
            running[(tree, sandbox)] = (client, server)
        samples: dict[tuple[str, str], list[float]] = {name: [] for name in names}
        cpu: dict[tuple[str, str], float] = {name: 0.0 for name in names}
        # The server process's own CPU (no child): what the sandbox costs the server itself,
        # apart from the processes it starts.
        own: dict[tuple[str, str], float] = {name: 0.0 for name in names}

        def call(name: tuple[str, str]) -> float:
            if pause:
                time.sleep(pause)
            client = running[name][0]
            started_at = time.perf_counter()
            response = client.post("/v1/executions", json={"command": "echo hi"})
            elapsed = (time.perf_counter() - started_at) * 1000
            body = response.json()
            assert response.status_code == 200 and body["output"] == "hi\n", body
            assert (body["sandbox"] is not None) == (name[1] == "on"), body
            return elapsed

        for _ in range(WARM_UP):
            for name in names:
                call(name)
        time.sleep(SETTLE_S)
        for name, (_, server) in running.items():
            cpu[name] = -server.tree_cpu_seconds()
            own[name] = -servers.cpu_seconds(server.pid)
        for turn in range(-(-calls // block)):
            # Who goes first by turns: the machine's noise hits all alike.
            first = turn % len(names)
            for name in names[first:] + names[:first]:
                for _ in range(min(block, calls - turn * block)):
                    samples[name].append(call(name))
        # The last call's standby, built after its answer, is the next call's cost as the
        # first measured call's was this run's: let it finish so each side counts one.
        time.sleep(SETTLE_S)
        for name, (_, server) in running.items():
            cpu[name] += server.tree_cpu_seconds()
            own[name] += servers.cpu_seconds(server.pid)
        method = next(iter(running.values()))[1].tree.method
    result: dict[str, object] = {
        "calls": calls,
        "confinement": confinement,
        "block": block,
        "pause_s": pause,
        "tree_cpu": method,
    }
    for tree in trees:
        part: dict[str, object] = {}
        for sandbox in ("on", "off"):
            values = samples[(tree, sandbox)]
            part[sandbox] = {
                "median_ms": round(statistics.median(values), 3),
                "p99_ms": round(percentile(values, 0.99), 3),
                "tree_cpu_ms_per_call": round(cpu[(tree, sandbox)] * 1000 / calls, 3),
                "server_cpu_ms_per_call": round(own[(tree, sandbox)] * 1000 / calls, 3),
            }
        on, off = (tree, "on"), (tree, "off")
        median_ratio = statistics.median(samples[on]) / statistics.median(samples[off])
        cpu_ratio = cpu[on] / cpu[off] if cpu[off] else float("nan")
        part["median_ratio"] = round(median_ratio, 3)
        part["tree_cpu_ratio"] = round(cpu_ratio, 3)
        part["server_cpu_ratio"] = round(own[on] / own[off] if own[off] else float("nan"), 3)
        part["holds"] = median_ratio <= TARGET and cpu_ratio <= TARGET
        if baseline is None:
            result.update(part)
        else:
            result[tree] = part
    result["target"] = TARGET
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    # `rlimit`: a host without delegated cgroups (a container), where the sandbox alone is
    # what a standby shell saves building on the request's path.
    parser.add_argument("--confinement", choices=["auto", "rlimit"], default="auto")
    parser.add_argument("--baseline", type=Path, help="another checkout, in the same run")
    # Calls in a row to one server before the next takes its turn: 1 alternates call by call,
    # more is back to back on each (its next standby built while its next call runs).
    parser.add_argument("--block", type=int, default=1)
    # Before each call: an agent's pace, where the standby is built between the calls.
    parser.add_argument("--pause", type=float, default=0.0)
    args = parser.parse_args()
    result = measure(args.calls, args.confinement, args.baseline, args.block, args.pause)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
