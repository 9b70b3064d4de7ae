"""Server CPU per request on the hot routes, this tree against another checkout, same run.

    .venv/bin/python -m bench.hotpath_ab --baseline DIR [--calls 400] [--rounds 3]

`DIR`: `git archive main | tar -x -C DIR`. Both servers run side by side (SQLite, this
virtualenv); each round sends `--calls` requests of one kind to each in turn, alternating who
goes first, and reads each server's own utime + stime from `/proc/<pid>/stat` around them
(`servers.cpu_seconds`), and its whole process tree's (server, standby shells, bwrap, the
commands: `bench/tree_cpu.py`). The figures are the median over rounds of CPU ms per request,
and of the per-round ratio this/baseline. Kinds: a foreground `echo hi` submit, `GET
/v1/executions/{id}?wait=1` of a finished run, its `/output`, and `/healthz`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from bench import servers
from bench.profile_session import baseline_server


def kinds(client: httpx.Client, finished_id: str) -> dict[str, Callable[[], None]]:
    def submit() -> None:
        response = client.post("/v1/executions", json={"command": "echo hi"})
        assert response.status_code == 200 and response.json()["exit_code"] == 0, response.text

    def read() -> None:
        response = client.get(f"/v1/executions/{finished_id}", params={"wait": 1})
        assert response.status_code == 200, response.text

    def output() -> None:
        response = client.get(f"/v1/executions/{finished_id}/output")
        assert response.status_code == 200 and response.content == b"hi\n", response.text

    def healthz() -> None:
        assert client.get("/healthz").status_code == 200

    return {
        "POST /v1/executions (echo hi)": submit,
        "GET /v1/executions/{id}?wait=1": read,
        "GET /v1/executions/{id}/output": output,
        "GET /healthz": healthz,
    }


def measure(
    server: servers.Server, call: Callable[[], None], calls: int
) -> tuple[float, float, list[float]]:
    """The server's CPU ms per request, its whole tree's, and each request's wall ms."""
    walls = []
    before = servers.cpu_seconds(server.pid)
    tree_before = server.tree_cpu_seconds()
    for _ in range(calls):
        started = time.perf_counter()
        call()
        walls.append((time.perf_counter() - started) * 1000)
    tree = (server.tree_cpu_seconds() - tree_before) * 1000 / calls
    return (servers.cpu_seconds(server.pid) - before) * 1000 / calls, tree, walls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with (
        servers.shellgate(auto_background_ms="30000") as ours,
        baseline_server(args.baseline) as theirs,
    ):
        assert theirs is not None
        clients = {}
        subjects = {}
        for label, server in (("this", ours), ("baseline", theirs)):
            client = httpx.Client(base_url=server.base_url, headers=server.headers, timeout=30)
            finished = client.post("/v1/executions", json={"command": "echo hi"}).json()["id"]
            clients[label] = client
            subjects[label] = (server, kinds(client, finished))
        names = list(subjects["this"][1])
        cpu: dict[tuple[str, str], list[float]] = {}
        tree: dict[tuple[str, str], list[float]] = {}
        wall: dict[tuple[str, str], list[float]] = {}
        for round_index in range(args.rounds):
            order = ["this", "baseline"] if round_index % 2 == 0 else ["baseline", "this"]
            for name in names:
                for label in order:
                    server, calls = subjects[label]
                    for _ in range(20):  # warm up
                        calls[name]()
                    cpu_ms, tree_ms, walls = measure(server, calls[name], args.calls)
                    cpu.setdefault((name, label), []).append(cpu_ms)
                    tree.setdefault((name, label), []).append(tree_ms)
                    wall.setdefault((name, label), []).extend(walls)
        for client in clients.values():
            client.close()
    print(
        f"{args.rounds} rounds × {args.calls} calls; CPU ms per request, median over rounds;"
        " wall ms, median over all calls"
    )
    print(
        "| request | CPU baseline | CPU this | this/baseline | tree CPU baseline | tree CPU this"
        " | this/baseline | wall baseline | wall this | this/baseline |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in names:
        this, base = cpu[(name, "this")], cpu[(name, "baseline")]
        ratio = statistics.median(a / b for a, b in zip(this, base, strict=True) if b)
        tree_this, tree_base = tree[(name, "this")], tree[(name, "baseline")]
        tree_ratio = statistics.median(
            a / b for a, b in zip(tree_this, tree_base, strict=True) if b
        )
        wall_base = statistics.median(wall[(name, "baseline")])
        wall_this = statistics.median(wall[(name, "this")])
        print(
            f"| {name} | {statistics.median(base):.3f} | {statistics.median(this):.3f} "
            f"| ×{ratio:.2f} | {statistics.median(tree_base):.3f} "
            f"| {statistics.median(tree_this):.3f} | ×{tree_ratio:.2f} "
            f"| {wall_base:.2f} | {wall_this:.2f} | ×{wall_this / wall_base:.2f} |"
        )


if __name__ == "__main__":
    main()
