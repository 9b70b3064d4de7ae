"""session grant: a new session's sandbox request loses its fake execution record

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06 17:30:00.000000

Until here a new session's sandbox request (approval subject `session`) was kept on an
execution record that never ran a process, listed with the others, whose stored request held
the grant until a session took it. The grant now lives on the approval (`session_grant`, null
once a session has used it) and the approval names no execution. The upgrade moves each grant
and deletes its record (and the record's log, if one was ever written); the downgrade gives
each session approval a record again.
"""

import contextlib
import json
import os
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The key of the grant in a record's stored request (app/sessions/sandbox_approval.py, 0016).
GRANT_KEY = "new_session_sandbox"

_APPROVALS = sa.table(
    "approvals",
    sa.column("id", sa.String()),
    sa.column("subject", sa.String()),
    sa.column("execution_id", sa.String()),
    sa.column("command", sa.Text()),
    sa.column("cwd", sa.Text()),
    sa.column("state", sa.String()),
    sa.column("requested_by", sa.String()),
    sa.column("decided_by", sa.String()),
    sa.column("decision_reason", sa.Text()),
    sa.column("created_at", sa.DateTime(timezone=True)),
    sa.column("decided_at", sa.DateTime(timezone=True)),
    sa.column("session_grant", sa.Text()),
)
_EXECUTIONS = sa.table(
    "executions",
    sa.column("id", sa.String()),
    sa.column("owner", sa.String()),
    sa.column("command", sa.Text()),
    sa.column("original_command", sa.Text()),
    sa.column("cwd", sa.Text()),
    sa.column("state", sa.String()),
    sa.column("mode", sa.String()),
    sa.column("pty", sa.Boolean()),
    sa.column("timed_out", sa.Boolean()),
    sa.column("timeout_disabled", sa.Boolean()),
    sa.column("notices", sa.Text()),
    sa.column("total_bytes", sa.BigInteger()),
    sa.column("total_lines", sa.BigInteger()),
    sa.column("output_bytes", sa.Integer()),
    sa.column("output_lines", sa.Integer()),
    sa.column("elided_bytes", sa.BigInteger()),
    sa.column("truncated", sa.Boolean()),
    sa.column("artifact_path", sa.Text()),
    sa.column("approval_id", sa.String()),
    sa.column("pending_request", sa.Text()),
    sa.column("text", sa.Text()),
    sa.column("created_at", sa.DateTime(timezone=True)),
    sa.column("finished_at", sa.DateTime(timezone=True)),
)


def upgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(sa.Column("session_grant", sa.Text(), nullable=True))
    connection = op.get_bind()
    records = connection.execute(
        sa.select(
            _APPROVALS.c.id,
            _EXECUTIONS.c.id.label("record"),
            _EXECUTIONS.c.pending_request,
            _EXECUTIONS.c.artifact_path,
        )
        .join(_EXECUTIONS, _EXECUTIONS.c.id == _APPROVALS.c.execution_id)
        .where(_APPROVALS.c.subject == "session")
    ).all()
    for row in records:
        # A taken grant (the session was made) stays taken: null.
        grant = json.loads(row.pending_request or "{}").get(GRANT_KEY)
        connection.execute(
            sa.update(_APPROVALS)
            .where(_APPROVALS.c.id == row.id)
            .values(
                execution_id=None,
                session_grant=None if grant is None else json.dumps(grant),
            )
        )
        # The record never ran a process: a log exists only if something wrote one anyway.
        if row.artifact_path:
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                os.unlink(row.artifact_path)
        connection.execute(sa.delete(_EXECUTIONS).where(_EXECUTIONS.c.id == row.record))


def downgrade() -> None:
    connection = op.get_bind()
    rows = connection.execute(
        sa.select(_APPROVALS).where(
            _APPROVALS.c.subject == "session", _APPROVALS.c.execution_id.is_(None)
        )
    ).all()
    for row in rows:
        # The record as revision 0016's code left it: awaiting, or ended by the decision.
        record_id = "ex_" + row.id.removeprefix("ap_")
        if row.state == "pending":
            state, text, notices, finished = "awaiting_approval", None, "[]", None
        else:
            by = row.decided_by or "system"
            if row.state == "approved":
                state = "completed"
                text = f"Approved by {by}; the session is created by the call that asked"
            else:
                why = row.decision_reason or "no reason given"
                state, text = "rejected", f"Approval {row.state} by {by}: {why}"
            notices, finished = json.dumps([text]), row.decided_at or row.created_at
        grant = None if row.session_grant is None else json.loads(row.session_grant)
        connection.execute(
            sa.insert(_EXECUTIONS).values(
                id=record_id,
                owner=row.requested_by,
                command=row.command,
                original_command=row.command,
                cwd=row.cwd,
                state=state,
                mode="foreground",
                pty=False,
                timed_out=False,
                timeout_disabled=False,
                notices=notices,
                total_bytes=0,
                total_lines=0,
                output_bytes=0,
                output_lines=0,
                elided_bytes=0,
                truncated=False,
                artifact_path="",
                approval_id=row.id,
                pending_request=None if grant is None else json.dumps({GRANT_KEY: grant}),
                text=text,
                created_at=row.created_at,
                finished_at=finished,
            )
        )
        connection.execute(
            sa.update(_APPROVALS).where(_APPROVALS.c.id == row.id).values(execution_id=record_id)
        )
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("session_grant")
