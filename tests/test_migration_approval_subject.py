"""Migration 0016: a prompted file operation's approval was anchored on an execution record that
never ran; the upgrade points the approval at the operation and deletes the anchor (and its log),
leaves commands' approvals on their executions, marks a new session's sandbox request, and the
server then settles a moved approval as it settles any file approval. The downgrade gives the
file approvals their anchors back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from alembic import command
from sqlalchemy import create_engine, text

from app.store.migrate import alembic_config
from tests.conftest import AGENT, APPROVER, make_settings, serve
from tests.databases import ServerDatabase

EXECUTION_COLUMNS = (
    "id, owner, command, original_command, cwd, state, mode, pty, timed_out, timeout_disabled,"
    " notices, total_bytes, total_lines, output_bytes, output_lines, elided_bytes, truncated,"
    " artifact_path, approval_id, pending_request, text, created_at, finished_at"
)
APPROVAL_COLUMNS = (
    "id, execution_id, command, cwd, env, pty, reason, kind, state, requested_by, decided_by,"
    " decision_reason, created_at, decided_at, expires_at"
)


def insert_execution(connection: Any, row: dict[str, Any]) -> None:
    values = {
        "owner": "alice",
        "mode": "foreground",
        "no": False,
        "notices": "[]",
        "pending_request": None,
        "text": None,
        "finished_at": None,
        **row,
    }
    connection.execute(
        text(
            f"INSERT INTO executions ({EXECUTION_COLUMNS}) VALUES (:id, :owner, :command,"
            " :command, :cwd, :state, :mode, :no, :no, :no, :notices, 0, 0, 0, 0, 0, :no,"
            " :artifact_path, :approval_id, :pending_request, :text, :created_at, :finished_at)"
        ),
        values,
    )


def insert_approval(connection: Any, row: dict[str, Any]) -> None:
    values = {"decided_by": None, "decision_reason": None, "decided_at": None, **row}
    connection.execute(
        text(
            f"INSERT INTO approvals ({APPROVAL_COLUMNS}) VALUES (:id, :execution_id, :command,"
            " :cwd, '{}', :no, :reason, :kind, :state, 'alice', :decided_by, :decision_reason,"
            " :created_at, :decided_at, :expires_at)"
        ),
        {"no": False, "reason": "outside the workspace", **values},
    )


def insert_file_operation(connection: Any, row: dict[str, Any]) -> None:
    connection.execute(
        text(
            "INSERT INTO file_operations (id, owner, op, path, resolved_path, size, verdict,"
            " reason, state, message, approval_id, execution_id, created_at, finished_at)"
            " VALUES (:id, 'alice', 'write', :path, :path, 1, 'prompt', 'outside the"
            " workspace', :state, :message, :approval_id, :execution_id, :now, :finished_at)"
        ),
        row,
    )


def write_rows_as_0015_did(url: str, outside: Path, artifacts: Path) -> None:
    """Two file operations anchored as revision 0015's code anchored them (one pending, one
    denied, whose anchor has a log on disk), a command awaiting approval, and a new session's
    sandbox request."""
    now = datetime.now(UTC)
    later = now + timedelta(hours=1)
    artifacts.mkdir(parents=True, exist_ok=True)
    (artifacts / "ex_anchordenied.log").write_text("an anchor's log")
    with create_engine(url).begin() as connection:
        for name, state, approval_state in (
            ("pending", "awaiting_approval", "pending"),
            ("denied", "rejected", "denied"),
        ):
            path = str(outside / f"{name}.txt")
            insert_execution(
                connection,
                {
                    "id": f"ex_anchor{name}",
                    "command": f"[file write] {path} (1 bytes)",
                    "cwd": str(outside),
                    "state": "awaiting_approval" if state == "awaiting_approval" else "rejected",
                    "artifact_path": str(artifacts / f"ex_anchor{name}.log"),
                    "approval_id": f"ap_file{name}",
                    "created_at": now,
                },
            )
            insert_approval(
                connection,
                {
                    "id": f"ap_file{name}",
                    "execution_id": f"ex_anchor{name}",
                    "command": f"[file write] {path} (1 bytes)",
                    "cwd": str(outside),
                    "kind": "file",
                    "state": approval_state,
                    "decided_by": None if approval_state == "pending" else "carol",
                    "decided_at": None if approval_state == "pending" else now,
                    "created_at": now,
                    "expires_at": later,
                },
            )
            insert_file_operation(
                connection,
                {
                    "id": f"fo_{name}",
                    "path": path,
                    "state": state,
                    "message": None if state == "awaiting_approval" else "Approval denied",
                    "approval_id": f"ap_file{name}",
                    "execution_id": f"ex_anchor{name}",
                    "now": now,
                    "finished_at": None,
                },
            )
        for execution_id, approval_id, command_text, kind in (
            ("ex_command", "ap_command", "echo waiting", "command"),
            ("ex_session", "ap_session", "[new session] sandbox: write /srv/x", "sandbox"),
        ):
            insert_execution(
                connection,
                {
                    "id": execution_id,
                    "command": command_text,
                    "cwd": "/tmp",
                    "state": "awaiting_approval",
                    "artifact_path": str(artifacts / f"{execution_id}.log"),
                    "approval_id": approval_id,
                    "created_at": now,
                },
            )
            insert_approval(
                connection,
                {
                    "id": approval_id,
                    "execution_id": execution_id,
                    "command": command_text,
                    "cwd": "/tmp",
                    "kind": kind,
                    "state": "pending",
                    "created_at": now,
                    "expires_at": later,
                },
            )


def stored(url: str, query: str) -> dict[str, tuple[Any, ...]]:
    engine = create_engine(url)
    with engine.connect() as connection:
        result = {row[0]: tuple(row[1:]) for row in connection.execute(text(query))}
    engine.dispose()
    return result


def test_upgrade_points_file_approvals_at_their_operations_and_drops_the_anchors(
    empty_database_url: str, tmp_path: Path, database_kind: str
) -> None:
    url = empty_database_url
    config = alembic_config(url)
    command.upgrade(config, "0015")
    outside = tmp_path / "outside"
    outside.mkdir()
    artifacts = tmp_path / "artifacts"
    write_rows_as_0015_did(url, outside, artifacts)

    command.upgrade(config, "0016")

    approvals = stored(
        url, "SELECT id, subject, execution_id, file_operation_id, state FROM approvals"
    )
    assert approvals == {
        "ap_filepending": ("file_operation", None, "fo_pending", "pending"),
        "ap_filedenied": ("file_operation", None, "fo_denied", "denied"),
        "ap_command": ("execution", "ex_command", None, "pending"),
        "ap_session": ("session", "ex_session", None, "pending"),
    }
    assert set(stored(url, "SELECT id FROM executions")) == {"ex_command", "ex_session"}
    assert not (artifacts / "ex_anchordenied.log").exists()

    # The server shows and settles a moved approval as one it asked for itself.
    database = ServerDatabase(database_kind, url)
    with (
        serve(make_settings(tmp_path / "server", database)) as live,
        live.client(APPROVER) as carol,
        live.client(AGENT) as alice,
    ):
        shown = carol.get("/v1/approvals/ap_filepending").json()
        assert shown["kind"] == "file" and shown["execution_id"] is None
        assert shown["file_operation_id"] == "fo_pending"
        # The server upgraded on to the head: 0017 drops the session request's record too.
        listed = alice.get("/v1/executions", params={"limit": 500}).json()["data"]
        assert {item["id"] for item in listed} == {"ex_command"}
        assert carol.post("/v1/approvals/ap_filepending/approve", json={}).status_code == 200
        written = alice.put(
            "/v1/files",
            params={"path": str(outside / "pending.txt"), "approval_id": "ap_filepending"},
            content=b"x",
        )
        assert written.status_code == 201, written.text
    assert (outside / "pending.txt").read_bytes() == b"x"

    command.downgrade(config, "0015")
    anchors = stored(
        url, "SELECT id, execution_id FROM file_operations WHERE approval_id IS NOT NULL"
    )
    assert {operation: anchor is not None for operation, (anchor,) in anchors.items()} == {
        "fo_pending": True,
        "fo_denied": True,
    }
    kept = stored(url, "SELECT id, execution_id, state FROM approvals")
    executions = stored(url, "SELECT id, state, approval_id FROM executions")
    for operation, (anchor,) in anchors.items():
        approval_id = f"ap_file{operation.removeprefix('fo_')}"
        assert kept[approval_id][0] == anchor
        assert executions[anchor][1] == approval_id
    assert executions[anchors["fo_pending"][0]][0] == "completed"
    assert executions[anchors["fo_denied"][0]][0] == "rejected"
