"""Several replicas: foreground `echo hi` latency and server CPU per call, and 32 clients
looping on a foreground `sleep 0.1`, for one server on SQLite, one on PostgreSQL and two
replicas sharing PostgreSQL (the clients split between them), in alternating rounds of the
same run. Ratios are the median of the per-round ratios (each under that round's load).

    .venv/bin/python -m bench.bench_cluster [--rounds 3] [--calls 60] [--seconds 3]

Needs the PostgreSQL at SHELLGATE_TEST_POSTGRES_URL (default postgres@127.0.0.1:5432/test); it
makes two scratch databases and drops them at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
from sqlalchemy import create_engine, make_url, text

from bench import servers
from bench.table import median_of_round_ratios, percentile

POSTGRES_URL = os.environ.get(
    "SHELLGATE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
SECRET = "bench-cluster-secret-0123456789"
# Every call foreground, and a cap the load never meets: these rows measure throughput.
MAX_JOBS = "64"
AUTO_BACKGROUND_MS = "30000"


@contextlib.contextmanager
def scratch_database() -> Iterator[str]:
    name = f"sg_bench_{uuid.uuid4().hex[:10]}"
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@dataclass
class Subject:
    name: str
    members: list[servers.Server]
    latency_ms: list[list[float]] = field(default_factory=list)  # per round
    cpu_ms: list[float] = field(default_factory=list)  # per round, all members
    throughput: list[float] = field(default_factory=list)  # per round, cmd/s


@contextlib.contextmanager
def replica_pair(database_url: str) -> Iterator[list[servers.Server]]:
    ports = [servers.free_port(), servers.free_port()]
    with contextlib.ExitStack() as stack:
        members = []
        for index, port in enumerate(ports):
            members.append(
                stack.enter_context(
                    servers.shellgate(
                        port=port,
                        max_jobs=MAX_JOBS,
                        auto_background_ms=AUTO_BACKGROUND_MS,
                        database_url=database_url,
                        node_id=f"bench-{index}",
                        node_url=f"http://127.0.0.1:{port}",
                        cluster_secret=SECRET,
                    )
                )
            )
        yield members


def cpu(subject: Subject) -> float:
    return sum(servers.cpu_seconds(member.pid) for member in subject.members)


def foreground_round(subjects: list[Subject], calls: int) -> None:
    clients = {
        subject.name: [
            httpx.Client(base_url=member.base_url, headers=member.headers, timeout=30)
            for member in subject.members
        ]
        for subject in subjects
    }
    try:
        for subject in subjects:  # warm up each member
            for client in clients[subject.name]:
                for _ in range(5):
                    client.post("/v1/executions", json={"command": "echo hi"})
        samples: dict[str, list[float]] = {subject.name: [] for subject in subjects}
        before = {subject.name: cpu(subject) for subject in subjects}
        for call in range(calls):
            for subject in subjects:
                pool = clients[subject.name]
                client = pool[call % len(pool)]  # a pair's calls alternate between replicas
                started = time.perf_counter()
                response = client.post("/v1/executions", json={"command": "echo hi"})
                if response.status_code != 200 or response.json()["output"] != "hi\n":
                    raise RuntimeError(f"{subject.name}: {response.status_code} {response.text}")
                samples[subject.name].append((time.perf_counter() - started) * 1000)
        for subject in subjects:
            subject.latency_ms.append(samples[subject.name])
            subject.cpu_ms.append((cpu(subject) - before[subject.name]) * 1000 / calls)
    finally:
        for pool in clients.values():
            for client in pool:
                client.close()


async def load(subject: Subject, seconds: float, clients: int = 32) -> float:
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    pool = [
        httpx.AsyncClient(
            base_url=member.base_url, headers=member.headers, timeout=60, limits=limits
        )
        for member in subject.members
    ]
    done = 0
    deadline = time.monotonic() + seconds

    async def caller(client: httpx.AsyncClient) -> None:
        nonlocal done
        while time.monotonic() < deadline:
            response = await client.post("/v1/executions", json={"command": "sleep 0.1"})
            if response.status_code != 200 or response.json().get("exit_code") != 0:
                raise RuntimeError(f"{subject.name}: {response.status_code} {response.text}")
            done += 1

    started = time.monotonic()
    try:
        await asyncio.gather(*(caller(pool[index % len(pool)]) for index in range(clients)))
    finally:
        for client in pool:
            await client.aclose()
    return done / (time.monotonic() - started)


def report(subjects: dict[str, Subject]) -> str:
    lines = [
        "| subject | `echo hi` median | p99 (pooled) | server CPU per call | 32 × `sleep 0.1` |",
        "|---|---|---|---|---|",
    ]
    for subject in subjects.values():
        pooled = [sample for round_ in subject.latency_ms for sample in round_]
        lines.append(
            f"| {subject.name} | {statistics.median(pooled):.1f} ms "
            f"| {percentile(pooled, 0.99):.1f} ms | {statistics.median(subject.cpu_ms):.2f} ms "
            f"| {statistics.median(subject.throughput):.1f} cmd/s |"
        )
    sqlite, postgres, pair = (subjects[name] for name in ("SQLite, one", "PG, one", "PG, two"))

    def medians(subject: Subject) -> list[float]:
        return [statistics.median(round_) for round_ in subject.latency_ms]

    ratios = [
        ("PostgreSQL / SQLite, one server", postgres, sqlite),
        ("two replicas / one, PostgreSQL", pair, postgres),
    ]
    lines += ["", "| ratio | latency | CPU per call | throughput |", "|---|---|---|---|"]
    for label, ours, theirs in ratios:
        lines.append(
            f"| {label} | ×{median_of_round_ratios(medians(ours), medians(theirs)):.2f} "
            f"| ×{median_of_round_ratios(ours.cpu_ms, theirs.cpu_ms):.2f} "
            f"| ×{median_of_round_ratios(ours.throughput, theirs.throughput):.2f} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--seconds", type=float, default=3.0)
    arguments = parser.parse_args()
    with (
        scratch_database() as single_url,
        scratch_database() as pair_url,
        servers.shellgate(max_jobs=MAX_JOBS, auto_background_ms=AUTO_BACKGROUND_MS) as on_sqlite,
        servers.shellgate(
            max_jobs=MAX_JOBS, auto_background_ms=AUTO_BACKGROUND_MS, database_url=single_url
        ) as on_postgres,
        replica_pair(pair_url) as pair,
    ):
        subjects = {
            "SQLite, one": Subject("SQLite, one", [on_sqlite]),
            "PG, one": Subject("PG, one", [on_postgres]),
            "PG, two": Subject("PG, two", pair),
        }
        ordered = list(subjects.values())
        for index in range(arguments.rounds):
            foreground_round(ordered, arguments.calls)
            turn = ordered[index % 3 :] + ordered[: index % 3]  # who loads first rotates
            for subject in turn:
                subject.throughput.append(asyncio.run(load(subject, arguments.seconds)))
            print(f"round {index + 1} done", flush=True)
    print(report(subjects))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
