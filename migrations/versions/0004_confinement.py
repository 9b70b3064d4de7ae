"""confinement: the limits each execution ran with, and each session's limits

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 18:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("executions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("limits", sa.Text(), nullable=True))
        batch_op.add_column(
            sa.Column("confinement", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=True)
        )
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("limits", sa.Text(), nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.drop_column("limits")
    with op.batch_alter_table("executions", schema=None) as batch_op:
        batch_op.drop_column("confinement")
        batch_op.drop_column("limits")
