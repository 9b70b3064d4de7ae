"""One database write per fast foreground call, and no record lost when the server dies before
that write: the run's intent file becomes a `lost` record at the next start."""

from __future__ import annotations

import json
import signal
import sqlite3
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select

from app.crud import execution_row
from app.db import Database, make_engine
from app.executions.pending_record import (
    PENDING_RECORDS_DIR,
    IntentFiles,
    recover_pending_records,
)
from app.migrate import upgrade_to_head
from app.models import Execution
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


def intents(data_dir: Path) -> list[Path]:
    return sorted((data_dir / PENDING_RECORDS_DIR).glob("*.json"))


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
    # A delay far longer than the test: the row can only come from the intent file.
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
        eventually(lambda: len(intents(data_dir)) == 1, what="the run's intent file")
        row = json.loads(intents(data_dir)[0].read_text())
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
        first.stop(signal.SIGKILL)
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


def test_recovery_inserts_each_intent_once_and_drops_unreadable_ones(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    upgrade_to_head(url)
    db = Database(make_engine(url))
    files = IntentFiles(tmp_path)
    record = Execution(
        id="e-intent-1",
        owner="agent",
        command="sleep 1",
        original_command="sleep 1",
        cwd="/",
        state="running",
        artifact_path=str(tmp_path / "none.log"),
        started_at=datetime.now(UTC),
    )
    files.write(execution_row(record))
    (files.directory / "e-torn.json").write_text('{"id": "e-to')
    (files.directory / "e-bad.json").write_text('{"id": "e-bad"}')
    try:
        assert recover_pending_records(db, files) == ["e-intent-1"]
        assert intents(tmp_path) == []
        # A row the database refuses is set aside for an operator, and the start goes on.
        assert (files.directory / "e-bad.rejected").is_file()
        files.write(execution_row(record))
        assert recover_pending_records(db, files) == []  # already recorded: not twice
        with sqlite3.connect(tmp_path / "r.db") as raw:
            rows = raw.execute("SELECT id, state FROM executions").fetchall()
        assert rows == [("e-intent-1", "running")]
    finally:
        db.dispose()
