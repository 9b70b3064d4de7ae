"""Registry bytes per execution with inline output: a fresh server (SQLite) runs N foreground
calls that each print K KiB of base64 text, then the database file is measured once the
server has stopped (its WAL checkpointed into the file). Not part of `make bench`: a size, not a
timing, read when the registry's layout changes (issue 25: the inline output stored twice).

    .venv/bin/python -m bench.registry_size --runs 200 --kib 4 [--keep copy.db]
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
from pathlib import Path

import httpx

from bench import servers


def run(runs: int, kib: int) -> Path:
    data_dir = Path(servers.scratch_directory()) / "data"
    # base64 of random bytes: neither SQLite nor a TOAST compressor shrinks it.
    command = f"head -c {kib * 768} /dev/urandom | base64 -w 64"
    with (
        servers.shellgate(data_dir=data_dir) as server,
        httpx.Client(base_url=server.base_url, headers=server.headers, timeout=60) as client,
    ):
        for _ in range(runs):
            response = client.post("/v1/executions", json={"command": command})
            response.raise_for_status()
            assert response.json()["state"] == "completed", response.text
    return data_dir / "shellgate.db"


def describe(database: Path, runs: int) -> str:
    files = [database, database.with_name(database.name + "-wal")]
    size = sum(path.stat().st_size for path in files if path.exists())
    with sqlite3.connect(database) as db:
        columns = {row[1] for row in db.execute("PRAGMA table_info(executions)")}
        split = "text_after_output" in columns
        lengths = db.execute(
            "SELECT count(*), sum(length(output)), sum(length(text))"
            + (", sum(length(text_after_output))" if split else ", 0")
            + " FROM executions"
        ).fetchone()
        free_pages = db.execute("PRAGMA freelist_count").fetchone()[0]
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
    rows, output, text, after = (value or 0 for value in lengths)
    return (
        f"{database}: {size:,} bytes for {rows} executions ({size / runs / 1024:.1f} KiB each); "
        f"characters: output {output:,}, text {text:,}, text_after_output {after:,}; "
        f"free pages {free_pages} × {page_size}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--kib", type=int, default=4, help="KiB of output per call")
    parser.add_argument("--keep", type=Path, help="copy the database here (to migrate it, say)")
    arguments = parser.parse_args()
    database = run(arguments.runs, arguments.kib)
    print(describe(database, arguments.runs))
    if arguments.keep:
        shutil.copyfile(database, arguments.keep)


if __name__ == "__main__":
    main()
