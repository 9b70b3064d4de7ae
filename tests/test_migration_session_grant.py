"""Migration 0017: a new session's sandbox request (approval subject `session`) was kept on an
execution record that never ran, whose stored request held the grant; the upgrade moves the
grant onto the approval (null when a session already used it), deletes the record (and its
log), and the server then makes the session from a moved approval as from one it asked for
itself. The downgrade gives each session approval its record back."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from alembic import command
from sqlalchemy import create_engine

from app.store.migrate import alembic_config
from tests.conftest import AGENT, APPROVER, make_settings, serve
from tests.databases import ServerDatabase
from tests.test_migration_approval_subject import insert_approval, insert_execution, stored

GRANT_KEY = "new_session_sandbox"


def grant(outside: Path) -> dict[str, Any]:
    """A grant as revision 0016's code stored it: the profile, and what was asked."""
    return {
        "granted": {
            "network": "off",
            "write": [str(outside)],
            "hidden": [],
            "escalated": True,
        },
        "asked": {"write": [str(outside)], "network": None},
    }


def write_rows_as_0016_did(url: str, outside: Path, artifacts: Path) -> None:
    """Three session requests as 0016's code kept them (pending with its grant; approved and
    already used; denied, whose record has a log on disk) and a command awaiting approval."""
    now = datetime.now(UTC)
    later = now + timedelta(hours=1)
    artifacts.mkdir(parents=True, exist_ok=True)
    (artifacts / "ex_denied.log").write_text("a record's log")
    description = f"[new session] sandbox: write {outside}"
    with create_engine(url).begin() as connection:
        for name, state, approval_state, stored_request in (
            ("pending", "awaiting_approval", "pending", {GRANT_KEY: grant(outside)}),
            ("used", "completed", "approved", None),
            ("denied", "rejected", "denied", {GRANT_KEY: grant(outside)}),
        ):
            insert_execution(
                connection,
                {
                    "id": f"ex_{name}",
                    "command": description,
                    "cwd": str(outside),
                    "state": state,
                    "artifact_path": str(artifacts / f"ex_{name}.log"),
                    "approval_id": f"ap_{name}",
                    "pending_request": None
                    if stored_request is None
                    else json.dumps(stored_request),
                    "created_at": now,
                },
            )
            insert_approval(
                connection,
                {
                    "id": f"ap_{name}",
                    "execution_id": f"ex_{name}",
                    "command": description,
                    "cwd": str(outside),
                    "kind": "sandbox",
                    "state": approval_state,
                    "decided_by": None if approval_state == "pending" else "carol",
                    "decided_at": None if approval_state == "pending" else now,
                    "created_at": now,
                    "expires_at": later,
                },
            )
        insert_execution(
            connection,
            {
                "id": "ex_command",
                "command": "echo waiting",
                "cwd": "/tmp",
                "state": "awaiting_approval",
                "artifact_path": str(artifacts / "ex_command.log"),
                "approval_id": "ap_command",
                "created_at": now,
            },
        )
        insert_approval(
            connection,
            {
                "id": "ap_command",
                "execution_id": "ex_command",
                "command": "echo waiting",
                "cwd": "/tmp",
                "kind": "command",
                "state": "pending",
                "created_at": now,
                "expires_at": later,
            },
        )


def test_upgrade_moves_session_grants_onto_their_approvals_and_drops_the_records(
    empty_database_url: str, tmp_path: Path, database_kind: str
) -> None:
    url = empty_database_url
    config = alembic_config(url)
    command.upgrade(config, "0016")
    outside = tmp_path / "outside"
    outside.mkdir()
    artifacts = tmp_path / "artifacts"
    write_rows_as_0016_did(url, outside, artifacts)
    # 0016 marked the session requests; rows written under it say so themselves.
    with create_engine(url).begin() as connection:
        connection.exec_driver_sql(
            "UPDATE approvals SET subject = 'session' WHERE id IN ('ap_pending', 'ap_used',"
            " 'ap_denied')"
        )

    command.upgrade(config, "0017")

    approvals = stored(url, "SELECT id, subject, execution_id, session_grant FROM approvals")
    assert {key: row[:2] for key, row in approvals.items()} == {
        "ap_pending": ("session", None),
        "ap_used": ("session", None),
        "ap_denied": ("session", None),
        "ap_command": ("execution", "ex_command"),
    }
    assert json.loads(approvals["ap_pending"][2]) == grant(outside)
    assert approvals["ap_used"][2] is None
    assert set(stored(url, "SELECT id FROM executions")) == {"ex_command"}
    assert not (artifacts / "ex_denied.log").exists()

    # The server makes the session of a moved approval once, as of one it asked for itself.
    database = ServerDatabase(database_kind, url)
    sandbox = {"write": [str(outside)]}
    with (
        serve(make_settings(tmp_path / "server", database)) as live,
        live.client(APPROVER) as carol,
        live.client(AGENT) as alice,
    ):
        shown = carol.get("/v1/approvals/ap_pending").json()
        assert shown["kind"] == "sandbox" and shown["execution_id"] is None
        assert carol.post("/v1/approvals/ap_pending/approve", json={}).status_code == 200
        created = alice.post("/v1/sessions", json={"sandbox": sandbox, "approval_id": "ap_pending"})
        assert created.status_code == 201, created.text
        used = alice.post("/v1/sessions", json={"sandbox": sandbox, "approval_id": "ap_used"})
        assert used.status_code == 409, used.text
        assert "already used" in used.json()["error"]["message"]
        denied = alice.post("/v1/sessions", json={"sandbox": sandbox, "approval_id": "ap_denied"})
        assert denied.status_code == 403, denied.text
        listed = alice.get("/v1/executions", params={"limit": 500}).json()["data"]
        assert {item["id"] for item in listed} == {"ex_command"}

    command.downgrade(config, "0016")
    records = stored(url, "SELECT id, state, approval_id, pending_request FROM executions")
    kept = stored(url, "SELECT id, execution_id FROM approvals")
    for name, state in (("pending", "completed"), ("used", "completed"), ("denied", "rejected")):
        record_id = kept[f"ap_{name}"][0]
        assert record_id is not None, name
        assert records[record_id][:2] == (state, f"ap_{name}")
    # Both grants were used by now (the pending one made a session above); the denied one's
    # is kept, as 0016's code kept it.
    assert records[kept["ap_pending"][0]][2] is None
    denied_request = records[kept["ap_denied"][0]][2]
    assert json.loads(denied_request) == {GRANT_KEY: grant(outside)}


def test_downgrade_keeps_a_pending_grant_on_its_record(
    empty_database_url: str, tmp_path: Path
) -> None:
    url = empty_database_url
    config = alembic_config(url)
    command.upgrade(config, "0016")
    outside = tmp_path / "outside"
    outside.mkdir()
    write_rows_as_0016_did(url, outside, tmp_path / "artifacts")
    with create_engine(url).begin() as connection:
        connection.exec_driver_sql(
            "UPDATE approvals SET subject = 'session' WHERE id = 'ap_pending'"
        )
    command.upgrade(config, "0017")
    command.downgrade(config, "0016")
    records = stored(url, "SELECT approval_id, state, pending_request FROM executions")
    state, pending_request = records["ap_pending"]
    assert state == "awaiting_approval"
    assert json.loads(pending_request) == {GRANT_KEY: grant(outside)}
