"""The `registry` row of `make bench`: a foreground call and the executions list on a registry
of 100k rows against the same server build on an empty one, each round in rotated order.

The full registry is made once per run: a server runs one `echo hi` so the row has every
column a real call writes, then that row is copied 100k times with fresh ids and creation
times an hour apart per thousand (sqlite3, one transaction). Only rows: their logs are not
written (100k × three files would take minutes here); the logs' sharding keeps each
directory small whatever their number (app/output/artifact_log.py).
"""

from __future__ import annotations

import datetime
import sqlite3
import statistics
import time
import uuid
from pathlib import Path

import httpx

from bench import servers

ROWS = 100_000
QUICK_ROWS = 10_000


def seeded_data_dir(rows: int) -> Path:
    data_dir = Path(servers.scratch_directory()) / "data"
    with (
        servers.shellgate(data_dir=data_dir) as server,
        httpx.Client(base_url=server.base_url, headers=server.headers, timeout=30) as client,
    ):
        model = client.post("/v1/executions", json={"command": "echo hi"}).json()["id"]
    with sqlite3.connect(data_dir / "shellgate.db") as db:
        db.row_factory = sqlite3.Row
        row = dict(db.execute("SELECT * FROM executions WHERE id = ?", (model,)).fetchone())
        columns = list(row)
        start = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=30)
        copies = []
        for number in range(rows):
            row["id"] = uuid.uuid4().hex
            row["created_at"] = (start + datetime.timedelta(seconds=number * 3.6)).isoformat(" ")
            copies.append(tuple(row[column] for column in columns))
        marks = ", ".join("?" for _ in columns)
        db.executemany(f"INSERT INTO executions ({', '.join(columns)}) VALUES ({marks})", copies)
    return data_dir


# List reads per foreground call measured: a page takes a few ms, and 40 of them gave medians
# whose ratio spread ×0.98-1.50 across rounds of the same two servers on a quiet machine
# (200 each: ×1.01-1.04, bench/PROFILE.md, "The list at 100k rows, measured longer").
LIST_CALLS_PER_CALL = 5


def one_server(data_dir: Path | None, calls: int) -> tuple[float, float]:
    """Whole-tree CPU (ms) per foreground `echo hi` over `calls`, and the median (ms) of the
    first page of the executions list over LIST_CALLS_PER_CALL × `calls`, after 10 warm-up
    calls of each."""
    with (
        servers.shellgate(data_dir=data_dir, auto_background_ms="30000") as server,
        httpx.Client(base_url=server.base_url, headers=server.headers, timeout=30) as client,
    ):
        for _ in range(10):
            client.post("/v1/executions", json={"command": "echo hi"}).raise_for_status()
            client.get("/v1/executions", params={"limit": 50}).raise_for_status()
        time.sleep(0.3)
        before = server.tree_cpu_seconds()
        for _ in range(calls):
            client.post("/v1/executions", json={"command": "echo hi"}).raise_for_status()
        time.sleep(0.3)
        cpu_ms = (server.tree_cpu_seconds() - before) * 1000 / calls
        latencies = []
        for _ in range(calls * LIST_CALLS_PER_CALL):
            started = time.perf_counter()
            client.get("/v1/executions", params={"limit": 50}).raise_for_status()
            latencies.append((time.perf_counter() - started) * 1000)
    return cpu_ms, statistics.median(latencies)
