"""approval subject: an approval names what it settles; file operations lose their fake anchor

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06 05:10:00.000000

Until here every approval belonged to an execution, so a `prompt`ed file operation was given
one as its anchor: an execution record that never ran a process, listed with the others. An
approval now names its subject (`execution`, `file_operation`, `session`) and the record it is
about: `execution_id` or `file_operation_id`. The upgrade points each file operation's approval
at the operation and deletes its anchor execution (and the anchor's log, if one was ever
written); the approvals of a new session's sandbox keep their execution record, `session`.
The downgrade gives each file approval an anchor again.
"""

import contextlib
import json
import os
from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FILE_FK = "fk_approvals_file_operation_id"
# The description an anchored session request had (app/sessions/sandbox_approval.py).
SESSION_PREFIX = "[new session] sandbox: "

_APPROVALS = sa.table(
    "approvals",
    sa.column("id", sa.String()),
    sa.column("subject", sa.String()),
    sa.column("kind", sa.String()),
    sa.column("execution_id", sa.String()),
    sa.column("file_operation_id", sa.String()),
    sa.column("command", sa.Text()),
    sa.column("cwd", sa.Text()),
    sa.column("state", sa.String()),
    sa.column("decided_by", sa.String()),
    sa.column("decision_reason", sa.Text()),
    sa.column("created_at", sa.DateTime(timezone=True)),
    sa.column("decided_at", sa.DateTime(timezone=True)),
)
_FILES = sa.table(
    "file_operations",
    sa.column("id", sa.String()),
    sa.column("owner", sa.String()),
    sa.column("approval_id", sa.String()),
    sa.column("execution_id", sa.String()),
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
    sa.column("text", sa.Text()),
    sa.column("created_at", sa.DateTime(timezone=True)),
    sa.column("finished_at", sa.DateTime(timezone=True)),
)


def upgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(
            sa.Column(
                "subject",
                sqlmodel.sql.sqltypes.AutoString(length=16),
                nullable=False,
                server_default="execution",
            )
        )
        batch.add_column(
            sa.Column(
                "file_operation_id", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True
            )
        )
        batch.alter_column(
            "execution_id",
            existing_type=sqlmodel.sql.sqltypes.AutoString(length=64),
            nullable=True,
        )
        batch.create_foreign_key(FILE_FK, "file_operations", ["file_operation_id"], ["id"])
        batch.create_index("ix_approvals_file_operation", ["file_operation_id"])
    connection = op.get_bind()
    anchored = connection.execute(
        sa.select(_FILES.c.id, _FILES.c.approval_id, _FILES.c.execution_id).where(
            _FILES.c.approval_id.is_not(None)
        )
    ).all()
    if anchored:
        connection.execute(
            sa.update(_APPROVALS)
            .where(_APPROVALS.c.id == sa.bindparam("approval"))
            .values(
                subject="file_operation",
                file_operation_id=sa.bindparam("operation"),
                execution_id=None,
            ),
            [{"approval": row.approval_id, "operation": row.id} for row in anchored],
        )
    anchors = [row.execution_id for row in anchored if row.execution_id is not None]
    for start in range(0, len(anchors), 500):
        batch_ids = anchors[start : start + 500]
        logs = connection.execute(
            sa.select(_EXECUTIONS.c.artifact_path).where(_EXECUTIONS.c.id.in_(batch_ids))
        ).scalars()
        for path in logs:
            # An anchor never ran a process: a log exists only if something wrote one anyway.
            if path:
                with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                    os.unlink(path)
        connection.execute(sa.delete(_EXECUTIONS).where(_EXECUTIONS.c.id.in_(batch_ids)))
    # A new session's sandbox request keeps its record (it holds the grant until taken).
    sessions = sa.select(_EXECUTIONS.c.id).where(
        _EXECUTIONS.c.command.startswith(SESSION_PREFIX, autoescape=True),
        _EXECUTIONS.c.original_command == _EXECUTIONS.c.command,
    )
    connection.execute(
        sa.update(_APPROVALS)
        .where(_APPROVALS.c.kind == "sandbox", _APPROVALS.c.execution_id.in_(sessions))
        .values(subject="session")
    )
    with op.batch_alter_table("file_operations") as batch:
        batch.drop_column("execution_id")


def downgrade() -> None:
    with op.batch_alter_table("file_operations") as batch:
        batch.add_column(
            sa.Column("execution_id", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True)
        )
    connection = op.get_bind()
    rows = connection.execute(
        sa.select(_APPROVALS, _FILES.c.owner)
        .join(_FILES, _FILES.c.id == _APPROVALS.c.file_operation_id)
        .where(_APPROVALS.c.subject == "file_operation")
    ).all()
    for row in rows:
        # The anchor as that revision's code left it: awaiting, or ended by the decision.
        anchor_id = "ex_" + row.file_operation_id.removeprefix("fo_")
        if row.state == "pending":
            state, text, notices, finished = "awaiting_approval", None, "[]", None
        else:
            by = row.decided_by or "system"
            if row.state == "approved":
                state, text = "completed", f"approved by {by}; it runs in the call that asked"
            else:
                why = row.decision_reason or "no reason given"
                state, text = "rejected", f"Approval {row.state} by {by}: {why}"
            notices, finished = json.dumps([text]), row.decided_at or row.created_at
        connection.execute(
            sa.insert(_EXECUTIONS).values(
                id=anchor_id,
                owner=row.owner,
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
                text=text,
                created_at=row.created_at,
                finished_at=finished,
            )
        )
        connection.execute(
            sa.update(_APPROVALS).where(_APPROVALS.c.id == row.id).values(execution_id=anchor_id)
        )
        connection.execute(
            sa.update(_FILES)
            .where(_FILES.c.id == row.file_operation_id)
            .values(execution_id=anchor_id)
        )
    with op.batch_alter_table("approvals") as batch:
        batch.drop_index("ix_approvals_file_operation")
        batch.drop_constraint(FILE_FK, type_="foreignkey")
        batch.alter_column(
            "execution_id",
            existing_type=sqlmodel.sql.sqltypes.AutoString(length=64),
            nullable=False,
        )
        batch.drop_column("file_operation_id")
        batch.drop_column("subject")
