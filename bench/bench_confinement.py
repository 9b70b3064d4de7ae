"""The cost of confinement per execution, side by side in one run:

1. spawn: `true` spawned, waited for and cleaned up in-process, with no confinement (the plain
   spawn of before), with the `rlimit` backend (setrlimit in the child and a /proc sweep for the
   marker at the end) and with each cgroup backend this machine offers (cgroups created, the
   child joins them before exec, they are emptied and removed at the end);
2. HTTP: a foreground `POST /v1/executions {"command": "true"}` against two servers, one on
   `rlimit`, one on the strongest backend, calls alternating.

    .venv/bin/python -m bench.bench_confinement [--rounds 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from app.confinement import Backend, Limits, choose_backend
from app.process import ExitStatus, RunningProcess, SpawnSpec
from app.process.environment import build_environment
from bench.servers import TOKEN, shellgate
from bench.table import percentile

LIMITS = Limits(memory_mb=1024, processes=512, open_files=65536)


def summary(samples_ms: list[float]) -> dict[str, float]:
    return {
        "median_ms": round(statistics.median(samples_ms), 3),
        "p99_ms": round(percentile(samples_ms, 0.99), 3),
    }


def spawn_once(backend: Backend | None, index: int, workdir: str) -> None:
    execution_id = f"ex_bench{index:012d}"
    env = build_environment(execution_id=execution_id, caller_env=None, pty=False)
    unit = backend.open_unit(execution_id, LIMITS) if backend is not None else None
    done = threading.Event()

    def on_exit(_: ExitStatus) -> None:
        done.set()

    spec = SpawnSpec(
        argv=["/bin/bash", "-c", "true"],
        cwd=workdir,
        env=env,
        confinement=unit.child if unit is not None else None,
    )
    RunningProcess(spec, lambda data, stream: None, on_exit)
    done.wait(10)
    if unit is not None:
        unit.release(kill=True, sweep=False)  # as the server ends a run that ended by itself


def spawn_costs(rounds: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as scratch:
        backends: dict[str, Backend | None] = {"none": None}
        unavailable: dict[str, str] = {}
        for name in ("cgroup2", "cgroup1", "rlimit"):
            try:
                backends[name] = choose_backend(Path(scratch) / name, name).backend
            except OSError as error:
                unavailable[name] = str(error)
        samples: dict[str, list[float]] = {name: [] for name in backends}
        for index in range(20 + rounds):  # 20 warm-up rounds
            # Alternate so that noise from the rest of the machine hits every variant alike.
            for name, backend in backends.items():
                started = time.perf_counter()
                spawn_once(backend, index, scratch)
                if index >= 20:
                    samples[name].append((time.perf_counter() - started) * 1000)
        for backend in backends.values():
            if backend is not None:
                backend.close()
    baseline = statistics.median(samples["none"])
    return {
        "rounds": rounds,
        "variants": {
            name: {
                **summary(values),
                "extra_median_ms": round(statistics.median(values) - baseline, 3),
            }
            for name, values in samples.items()
        },
        "unavailable": unavailable,
    }


def http_costs(rounds: int) -> dict[str, object]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with (
        shellgate(confinement="rlimit") as plain,
        shellgate(confinement="auto") as strong,
        httpx.Client(base_url=plain.base_url, headers=headers) as weak_client,
        httpx.Client(base_url=strong.base_url, headers=headers) as strong_client,
    ):
        backend = strong_client.get("/v1/info").json()["confinement"]

        def caller(client: httpx.Client) -> Callable[[], None]:
            def call() -> None:
                response = client.post("/v1/executions", json={"command": "true"})
                assert response.status_code == 200 and response.json()["exit_code"] == 0

            return call

        calls = {"rlimit": caller(weak_client), backend: caller(strong_client)}
        samples: dict[str, list[float]] = {name: [] for name in calls}
        for index in range(20 + rounds):
            for name, call in calls.items():
                started = time.perf_counter()
                call()
                if index >= 20:
                    samples[name].append((time.perf_counter() - started) * 1000)
    return {
        "rounds": rounds,
        "servers": {name: summary(values) for name, values in samples.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    print(
        json.dumps(
            {"spawn": spawn_costs(args.rounds), "http": http_costs(args.rounds)},
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
