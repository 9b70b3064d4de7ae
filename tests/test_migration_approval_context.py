"""Migration 0003: approvals made before it learn their env, session and pty from their
execution, so that an approval pending across the upgrade still shows what will run; and the
revision goes back down cleanly."""

from __future__ import annotations

import json

from alembic import command
from sqlalchemy import create_engine, inspect, text

from app.store.migrate import alembic_config


def test_upgrade_fills_the_context_of_existing_approvals_and_downgrade_removes_it(
    empty_database_url: str,
) -> None:
    url = empty_database_url
    config = alembic_config(url)
    command.upgrade(config, "0002")
    engine = create_engine(url)
    draft = {"env": {"CALL": "c", "SHARED": "call"}, "pty": True, "session": "se_1"}
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO sessions (id, owner, cwd, env, timeout_ms, pty, created_at,"
                " updated_at) VALUES ('se_1', 'alice', '/tmp', :env, 1000, :yes, :t, :t)"
            ),
            {
                "env": json.dumps({"FROM_SESSION": "s", "SHARED": "session"}),
                "t": "2026-01-01",
                "yes": True,
            },
        )
        for execution_id, session, pending in (
            ("ex_pending", "se_1", json.dumps({"owner_role": "agent", "draft": json.dumps(draft)})),
            ("ex_plain", None, None),
        ):
            connection.execute(
                text(
                    "INSERT INTO executions (id, owner, command, original_command, cwd, state,"
                    " mode, pty, session_id, timed_out, timeout_disabled, notices, total_bytes,"
                    " total_lines, output_bytes, output_lines, elided_bytes, truncated,"
                    " artifact_path, pending_request, created_at) VALUES (:id, 'alice', 'x',"
                    " 'x', '/tmp', 'awaiting_approval', 'job', :pty, :session, :no, :no, '[]', 0,"
                    " 0, 0, 0, 0, :no, '/a', :pending, '2026-01-01')"
                ),
                {
                    "id": execution_id,
                    "pty": session is not None,
                    "session": session,
                    "pending": pending,
                    "no": False,
                },
            )
            connection.execute(
                text(
                    "INSERT INTO approvals (id, execution_id, command, cwd, reason, state,"
                    " requested_by, created_at, expires_at) VALUES (:id, :execution, 'x', '/tmp',"
                    " 'r', 'pending', 'alice', '2026-01-01', '2026-01-02')"
                ),
                {"id": f"ap_{execution_id}", "execution": execution_id},
            )

    command.upgrade(config, "0003")

    with engine.connect() as connection:
        rows = dict(
            (row[0], row[1:])
            for row in connection.execute(text("SELECT id, env, session_id, pty FROM approvals"))
        )
    assert json.loads(rows["ap_ex_pending"][0]) == {
        "FROM_SESSION": "s",
        "SHARED": "call",
        "CALL": "c",
    }
    assert rows["ap_ex_pending"][1:] == ("se_1", 1)
    assert json.loads(rows["ap_ex_plain"][0]) == {}
    assert rows["ap_ex_plain"][1:] == (None, 0)

    command.downgrade(config, "0002")
    columns = {column["name"] for column in inspect(engine).get_columns("approvals")}
    assert not {"env", "session_id", "pty"} & columns
    engine.dispose()
