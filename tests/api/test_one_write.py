"""One database write per fast foreground call, and no record lost when the server dies before
that write: the run's intent becomes a `lost` record at the next start. The intents are lines
of one journal per node: no file is made or removed per call."""

from __future__ import annotations

import json
import resource
import signal
import sqlite3
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from app.executions.pending_record import (
    JOURNAL_SUFFIX,
    PENDING_RECORDS_DIR,
    IntentJournal,
    read_unresolved,
    recover_pending_records,
)
from app.store.crud import execution_row
from app.store.db import Database, make_engine
from app.store.migrate import upgrade_to_head
from app.store.models import Execution
from tests.api.test_restart import ServerProcess, group_alive
from tests.conftest import LiveServer, run_foreground
from tests.databases import ServerDatabase
from tests.waiting import eventually

WRITE_LOG = """
CREATE TABLE IF NOT EXISTS write_log (seq INTEGER PRIMARY KEY, id TEXT, kind TEXT, state TEXT);
CREATE TRIGGER IF NOT EXISTS log_insert AFTER INSERT ON executions
BEGIN INSERT INTO write_log (id, kind, state) VALUES (NEW.id, 'insert', NEW.state); END;
CREATE TRIGGER IF NOT EXISTS log_update AFTER UPDATE ON executions
BEGIN INSERT INTO write_log (id, kind, state) VALUES (NEW.id, 'update', NEW.state); END;
"""


@pytest.fixture
def write_log(fresh_server: LiveServer) -> Iterator[sqlite3.Connection]:
    """Every write to the executions table, as SQLite triggers see them."""
    db = sqlite3.connect(fresh_server.data_dir / "shellgate.db", timeout=10)
    db.executescript(WRITE_LOG)
    yield db
    db.close()


def writes(db: sqlite3.Connection, execution_id: str) -> list[tuple[str, str]]:
    query = "SELECT kind, state FROM write_log WHERE id = ? ORDER BY seq"
    return [(kind, state) for kind, state in db.execute(query, (execution_id,))]


def intents(data_dir: Path) -> list[dict[str, Any]]:
    """Every unresolved intent in the data directory's journals."""
    journals = sorted((data_dir / PENDING_RECORDS_DIR).glob(f"*{JOURNAL_SUFFIX}"))
    return [row for journal in journals for _, row in read_unresolved(journal)]


@pytest.mark.sqlite_only("counts the writes with SQLite triggers")
@pytest.mark.settings(foreground_record_delay_ms=30_000, auto_background_ms=0)
def test_a_fast_foreground_call_is_one_insert_of_its_finished_row(
    fresh_server: LiveServer, write_log: sqlite3.Connection
) -> None:
    with fresh_server.client() as client:
        record = run_foreground(client, "echo hi")
        assert record["state"] == "completed" and record["output"] == "hi\n"
        assert writes(write_log, str(record["id"])) == [("insert", "completed")]
        # The row is whole: a later GET reads the same record from the database.
        stored = client.get(f"/v1/executions/{record['id']}").json()
        assert stored["state"] == "completed" and stored["exit_code"] == 0
        assert stored["output"] == "hi\n" and stored["command"] == "echo hi"
    assert intents(fresh_server.data_dir) == []


@pytest.mark.sqlite_only("counts the writes with SQLite triggers")
@pytest.mark.settings(foreground_record_delay_ms=30_000, auto_background_ms=0)
def test_a_fast_call_in_a_session_is_one_insert_and_keeps_the_session_state(
    fresh_server: LiveServer, write_log: sqlite3.Connection
) -> None:
    with fresh_server.client() as client:
        session = client.post("/v1/sessions", json={}).json()["id"]
        first = run_foreground(client, "export KEPT=yes", session=session)
        second = run_foreground(client, 'echo "$KEPT"', session=session)
    assert second["output"] == "yes\n"
    for record in (first, second):
        assert writes(write_log, str(record["id"])) == [("insert", "completed")]
        assert record["session"] == session
    assert intents(fresh_server.data_dir) == []


@pytest.mark.sqlite_only("counts the writes with SQLite triggers")
@pytest.mark.settings(foreground_record_delay_ms=200, auto_background_ms=0)
def test_a_call_running_past_the_delay_is_listed_as_running_then_finished(
    fresh_server: LiveServer, write_log: sqlite3.Connection
) -> None:
    answers: list[httpx.Response] = []
    with fresh_server.client() as client:
        call = threading.Thread(
            target=lambda: answers.append(
                client.post("/v1/executions", json={"command": "echo slow; sleep 2"})
            )
        )
        call.start()
        with fresh_server.client() as other:

            def listed_running() -> bool:
                page = other.get("/v1/executions", params={"state": "running"}).json()
                return any(item["command"] == "echo slow; sleep 2" for item in page["data"])

            eventually(listed_running, what="the running row of a call past the delay")
        call.join(30)
    assert answers and answers[0].status_code == 200, answers
    execution_id = answers[0].json()["id"]
    assert writes(write_log, execution_id) == [("insert", "running"), ("update", "completed")]
    assert intents(fresh_server.data_dir) == []


@pytest.mark.sqlite_only("counts the writes with SQLite triggers")
@pytest.mark.settings(foreground_record_delay_ms=0, auto_background_ms=0)
def test_a_zero_delay_writes_the_running_row_at_the_spawn(
    fresh_server: LiveServer, write_log: sqlite3.Connection
) -> None:
    with fresh_server.client() as client:
        record = run_foreground(client, "true")
    assert writes(write_log, str(record["id"])) == [("insert", "running"), ("update", "completed")]


@pytest.mark.settings(foreground_record_delay_ms=30_000, auto_background_ms=60)
def test_an_auto_backgrounded_call_has_its_row_before_the_answer(
    fresh_server: LiveServer,
) -> None:
    with fresh_server.client() as client:
        response = client.post("/v1/executions", json={"command": "sleep 1; echo done"})
        assert response.status_code == 202, response.text
        execution_id = response.json()["id"]
        # The id the 202 names is readable at once, as a job.
        record = client.get(f"/v1/executions/{execution_id}").json()
        assert record["state"] == "running" and record["mode"] == "job"
        done = client.get(f"/v1/executions/{execution_id}", params={"wait": 20}).json()
        assert done["state"] == "completed" and done["output"] == "done\n"


def test_a_server_killed_before_the_write_leaves_a_lost_record_and_no_orphan(
    tmp_path: Path, database: ServerDatabase
) -> None:
    data_dir, workspace = tmp_path / "data", tmp_path / "ws"
    workspace.mkdir()
    # A delay far longer than the test: the row can only come from the intent.
    env = {"SHELLGATE_FOREGROUND_RECORD_DELAY_MS": "60000", "SHELLGATE_AUTO_BACKGROUND_MS": "0"}
    first = ServerProcess(data_dir, workspace, database, env)
    outcome: list[object] = []
    try:
        client = first.client()

        def call() -> None:
            try:
                outcome.append(
                    client.post("/v1/executions", json={"command": "echo before; sleep 300"})
                )
            except httpx.TransportError as error:
                outcome.append(error)

        caller = threading.Thread(target=call, daemon=True)
        caller.start()
        eventually(lambda: len(intents(data_dir)) == 1, what="the run's intent")
        row = intents(data_dir)[0]
        eventually(
            lambda: b"before" in Path(row["artifact_path"]).read_bytes(),
            what="the command's first output in its log",
        )
        engine = database.engine(data_dir)
        with engine.connect() as connection:
            assert connection.scalar(select(func.count()).select_from(Execution)) == 0
        engine.dispose()
        assert group_alive(row["pgid"])
    finally:
        first.kill_leaving_commands()
    caller.join(30)
    assert outcome and isinstance(outcome[0], httpx.TransportError), outcome
    client.close()

    # The command outlived the server; the next start records it and ends it.
    assert group_alive(row["pgid"])
    second = ServerProcess(data_dir, workspace, database, env)
    try:
        with second.client() as again:
            record = again.get(f"/v1/executions/{row['id']}").json()
            assert record["state"] == "lost", record
            assert record["command"] == "echo before; sleep 300"
            assert record["output"] == "before\n"
            assert record["finished_at"] is not None
        eventually(lambda: not group_alive(row["pgid"]), what="the recovered group's end")
        assert intents(data_dir) == []
    finally:
        second.stop()


def _intent_record(execution_id: str, tmp_path: Path) -> Execution:
    return Execution(
        id=execution_id,
        owner="agent",
        command="sleep 1",
        original_command="sleep 1",
        cwd="/",
        state="running",
        artifact_path=str(tmp_path / "none.log"),
        started_at=datetime.now(UTC),
    )


@pytest.fixture
def registry_db(tmp_path: Path) -> Iterator[Database]:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    upgrade_to_head(url)
    db = Database(make_engine(url))
    yield db
    db.dispose()


def _rows(tmp_path: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(tmp_path / "r.db") as raw:
        return sorted(raw.execute("SELECT id, state FROM executions").fetchall())


def test_recovery_inserts_each_intent_once_and_drops_unreadable_ones(
    tmp_path: Path, registry_db: Database
) -> None:
    journal = IntentJournal(tmp_path, "node-a")
    journal.write(execution_row(_intent_record("e-intent-1", tmp_path)))
    journal.write(execution_row(_intent_record("e-resolved", tmp_path)))
    journal.remove("e-resolved")  # its row reached the database: nothing to recover
    journal.close()
    with journal.path.open("ab") as raw:
        raw.write(b'+ {"id": "e-bad"}\n')  # a row the database refuses
        raw.write(b'+ {"id": "e-to')  # torn by a crash in the middle of its write
    # What a version with one file per intent left behind is recovered too.
    legacy = tmp_path / PENDING_RECORDS_DIR / "e-legacy.json"
    legacy.write_text(json.dumps(execution_row(_intent_record("e-legacy", tmp_path)), default=str))
    (tmp_path / PENDING_RECORDS_DIR / "e-torn.json").write_text('{"id": "e-to')

    assert recover_pending_records(registry_db, journal) == ["e-intent-1", "e-legacy"]
    assert intents(tmp_path) == []
    assert journal.path.read_bytes() == b""
    assert sorted(p.name for p in (tmp_path / PENDING_RECORDS_DIR).iterdir()) == [
        "node-a.journal",
        "node-a.rejected",  # set aside for an operator; the start went on
    ]
    assert b'"e-bad"' in (tmp_path / PENDING_RECORDS_DIR / "node-a.rejected").read_bytes()
    # Written again (a start that died before emptying its journal): not recorded twice.
    journal.write(execution_row(_intent_record("e-intent-1", tmp_path)))
    assert recover_pending_records(registry_db, journal) == []
    assert _rows(tmp_path) == [("e-intent-1", "running"), ("e-legacy", "running")]


def test_another_nodes_journal_is_recovered_but_left_to_its_node(
    tmp_path: Path, registry_db: Database
) -> None:
    """A shared data directory: any start records what a dead replica left, but only the
    node holding a journal's lock rewrites it."""
    other = IntentJournal(tmp_path, "node-b")
    other.write(execution_row(_intent_record("e-of-b", tmp_path)))
    written = other.path.read_bytes()
    mine = IntentJournal(tmp_path, "node-a")
    assert recover_pending_records(registry_db, mine) == ["e-of-b"]
    assert other.path.read_bytes() == written
    assert _rows(tmp_path) == [("e-of-b", "running")]
    other.close()


def test_the_journal_is_emptied_in_place_and_bounded_when_calls_always_overlap(
    tmp_path: Path, registry_db: Database
) -> None:
    journal = IntentJournal(tmp_path, "node-a", compact_bytes=4096)
    row = execution_row(_intent_record("e-0", tmp_path))
    # Calls one after another: whenever nothing is pending past the size, emptied in place
    # (the same inode: nothing is freed that later file creations would have to skip).
    journal.write(row)
    inode = journal.path.stat().st_ino
    for number in range(200):
        journal.write({**row, "id": f"e-{number}"})
        journal.remove(f"e-{number}")
    journal.remove("e-0")
    assert journal.path.stat().st_size <= 4096 and journal.path.stat().st_ino == inode
    # One call always pending: rewritten with what is pending once past four times the size.
    journal.write({**row, "id": "e-long"})
    for number in range(200):
        journal.write({**row, "id": f"e-short-{number}"})
        journal.remove(f"e-short-{number}")
        assert journal.path.stat().st_size <= 4 * 4096 + 1024
    journal.write({**row, "id": "e-last"})
    journal.close()
    assert sorted(r["id"] for r in intents(tmp_path)) == ["e-last", "e-long"]
    assert sorted(recover_pending_records(registry_db, journal)) == ["e-last", "e-long"]


def test_a_failed_append_leaves_no_part_line_for_the_next(tmp_path: Path) -> None:
    """A full disk in the middle of a line: the next intent must not run into it."""
    journal = IntentJournal(tmp_path, "node-a")
    row = execution_row(_intent_record("e-1", tmp_path))
    journal.write(row)
    size = journal.path.stat().st_size
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 10, hard))
    try:
        with pytest.raises(OSError):
            journal.write({**row, "id": "e-2"})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    assert journal.path.stat().st_size == size
    journal.write({**row, "id": "e-3"})
    journal.close()
    assert [r["id"] for r in intents(tmp_path)] == ["e-1", "e-3"]


@pytest.mark.settings(foreground_record_delay_ms=30_000, auto_background_ms=0)
def test_quick_calls_make_and_free_no_file_in_the_data_directory(
    fresh_server: LiveServer,
) -> None:
    """What a call leaves is its log files; the intent and the standby's spec (app/process/
    standby.py) are a line and a memory file: on this project's ext4 without a journal, every
    file freed made each later create skip it (bench/PROFILE.md, "Files per call")."""
    with fresh_server.client() as client:
        run_foreground(client, "true")
        journal = next((fresh_server.data_dir / PENDING_RECORDS_DIR).glob(f"*{JOURNAL_SUFFIX}"))
        inode = journal.stat().st_ino
        before = _inodes_outside_logs(fresh_server.data_dir)
        for _ in range(10):
            assert run_foreground(client, "echo hi")["output"] == "hi\n"
    assert journal.stat().st_ino == inode
    assert _inodes_outside_logs(fresh_server.data_dir) == before
    assert intents(fresh_server.data_dir) == []


def _inodes_outside_logs(data_dir: Path) -> set[tuple[str, int, int]]:
    """Every file and directory of the data directory but the logs and the database, with its
    inode and, for a directory, the time of its last change of entries (a file made or
    removed there moves it)."""
    found = set()
    for path in [data_dir, *data_dir.rglob("*")]:
        relative = path.relative_to(data_dir)
        if relative.parts[:1] == ("artifacts",) or path.name.startswith("shellgate.db"):
            continue
        status = path.stat()
        found.add((str(relative), status.st_ino, status.st_mtime_ns if path.is_dir() else 0))
    return found
