"""notify: completion delivery of an execution's terminal record to a webhook

Revision ID: 0006
Revises: 0007
Create Date: 2026-11-30 22:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("executions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("notify_url", sa.Text(), nullable=True))
        batch_op.add_column(
            sa.Column("notify_state", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=True)
        )
        batch_op.add_column(sa.Column("notify_attempts", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("notify_next_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index("ix_executions_notify_state", ["notify_state"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("executions", schema=None) as batch_op:
        batch_op.drop_index("ix_executions_notify_state")
        batch_op.drop_column("notify_next_at")
        batch_op.drop_column("notify_attempts")
        batch_op.drop_column("notify_state")
        batch_op.drop_column("notify_url")
