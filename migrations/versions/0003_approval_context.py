"""approval context: env, session and pty beside the command, so approvers see all that runs

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 18:30:00.000000
"""

import json
from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("approvals", schema=None) as batch_op:
        batch_op.add_column(sa.Column("env", sa.Text(), nullable=False, server_default="{}"))
        batch_op.add_column(
            sa.Column("session_id", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True)
        )
        batch_op.add_column(
            sa.Column("pty", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch_op.create_index(
            "ix_approvals_requested_by_state", ["requested_by", "state"], unique=False
        )
    _backfill_from_executions()


def _backfill_from_executions() -> None:
    """Approvals made before this revision learn their context from their execution: the
    session and pty columns, and for one still pending the env its stored request carries
    (the session's env overlaid by the call's, as new approvals show it)."""
    connection = op.get_bind()
    rows = connection.execute(
        sa.text(
            "SELECT a.id, e.session_id, e.pty, e.pending_request, s.env "
            "FROM approvals a JOIN executions e ON e.id = a.execution_id "
            "LEFT JOIN sessions s ON s.id = e.session_id"
        )
    ).all()
    for approval_id, session_id, pty, pending_request, session_env in rows:
        env: dict[str, str] = {}
        try:
            env.update(json.loads(session_env or "{}"))
            draft = json.loads(json.loads(pending_request or "{}").get("draft") or "{}")
            env.update(draft.get("env") or {})
        except (ValueError, TypeError, AttributeError):
            env = {}
        connection.execute(
            sa.text(
                "UPDATE approvals SET env = :env, session_id = :session, pty = :pty WHERE id = :id"
            ),
            {"env": json.dumps(env), "session": session_id, "pty": bool(pty), "id": approval_id},
        )


def downgrade() -> None:
    with op.batch_alter_table("approvals", schema=None) as batch_op:
        batch_op.drop_index("ix_approvals_requested_by_state")
        batch_op.drop_column("pty")
        batch_op.drop_column("session_id")
        batch_op.drop_column("env")
