"""nodes: the replicas sharing the database, the node of each execution and session, and the
job slots every replica counts against one cap

Revision ID: 0005
Revises: 0007
Create Date: 2026-11-30 22:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0005"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "nodes",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("url", sa.Text(), nullable=True),
        sa.Column("version", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_heartbeat", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "job_slots",
        sa.Column("execution_id", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("node", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("execution_id"),
    )
    op.create_index("ix_job_slots_node", "job_slots", ["node"])
    with op.batch_alter_table("executions", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("node", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True)
        )
        batch_op.create_index("ix_executions_node_state", ["node", "state"])
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("node", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.drop_column("node")
    with op.batch_alter_table("executions", schema=None) as batch_op:
        batch_op.drop_index("ix_executions_node_state")
        batch_op.drop_column("node")
    op.drop_index("ix_job_slots_node", table_name="job_slots")
    op.drop_table("job_slots")
    op.drop_table("nodes")
