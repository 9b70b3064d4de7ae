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
work, the namespaces' end among it, was not counted. Target: the sandbox adds at most ×1.15
to both.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import httpx

from bench.servers import TOKEN, shellgate
from bench.table import percentile

WARM_UP = 20
# Long enough for a standby started after an answer to be built and waiting.
SETTLE_S = 1.0
TARGET = 1.15


def measure(calls: int, confinement: str = "auto") -> dict[str, object]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with (
        shellgate(sandbox="on", confinement=confinement) as sandboxed,
        shellgate(sandbox="off", confinement=confinement) as plain,
        httpx.Client(base_url=sandboxed.base_url, headers=headers) as on_client,
        httpx.Client(base_url=plain.base_url, headers=headers) as off_client,
    ):
        enforced = on_client.get("/v1/info").json()["sandbox"]["enforced"]
        assert enforced is True
        assert off_client.get("/v1/info").json()["sandbox"]["enforced"] is False
        servers = {"on": (on_client, sandboxed), "off": (off_client, plain)}
        samples: dict[str, list[float]] = {"on": [], "off": []}
        cpu: dict[str, float] = {"on": 0.0, "off": 0.0}
        for index in range(WARM_UP + calls):
            if index == WARM_UP:
                time.sleep(SETTLE_S)
                for name, (_, server) in servers.items():
                    cpu[name] = -server.tree_cpu_seconds()
            # Alternating, who goes first by turns: the machine's noise hits both alike.
            order = ("on", "off") if index % 2 == 0 else ("off", "on")
            for name in order:
                client, server = servers[name]
                started = time.perf_counter()
                response = client.post("/v1/executions", json={"command": "echo hi"})
                elapsed = (time.perf_counter() - started) * 1000
                body = response.json()
                assert response.status_code == 200 and body["output"] == "hi\n", body
                assert (body["sandbox"] is not None) == (name == "on"), body
                if index >= WARM_UP:
                    samples[name].append(elapsed)
        # The last call's standby, built after its answer, is the next call's cost as the
        # first measured call's was this run's: let it finish so each side counts one.
        time.sleep(SETTLE_S)
        for name, (_, server) in servers.items():
            cpu[name] += server.tree_cpu_seconds()
    result: dict[str, object] = {
        "calls": calls,
        "confinement": confinement,
        "tree_cpu": sandboxed.tree.method,
    }
    for name, values in samples.items():
        result[name] = {
            "median_ms": round(statistics.median(values), 3),
            "p99_ms": round(percentile(values, 0.99), 3),
            "tree_cpu_ms_per_call": round(cpu[name] * 1000 / calls, 3),
        }
    median_ratio = statistics.median(samples["on"]) / statistics.median(samples["off"])
    cpu_ratio = cpu["on"] / cpu["off"] if cpu["off"] else float("nan")
    result["median_ratio"] = round(median_ratio, 3)
    result["tree_cpu_ratio"] = round(cpu_ratio, 3)
    result["target"] = TARGET
    result["holds"] = median_ratio <= TARGET and cpu_ratio <= TARGET
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    # `rlimit`: a host without delegated cgroups (a container), where the sandbox alone is
    # what a standby shell saves building on the request's path.
    parser.add_argument("--confinement", choices=["auto", "rlimit"], default="auto")
    args = parser.parse_args()
    print(json.dumps(measure(args.calls, args.confinement), indent=2))


if __name__ == "__main__":
    main()
