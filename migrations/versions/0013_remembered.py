"""remembered: the policy's reason on each execution and the remembered rule that allowed it;
the pattern an approval offers to remember and the rule its approval made

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05 19:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("executions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("policy_reason", sa.Text(), nullable=True))
        batch_op.add_column(
            sa.Column("remembered_rule", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True)
        )
    with op.batch_alter_table("approvals", schema=None) as batch_op:
        batch_op.add_column(sa.Column("suggested_pattern", sa.Text(), nullable=True))
        batch_op.add_column(
            sa.Column("remembered_rule", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("approvals", schema=None) as batch_op:
        batch_op.drop_column("remembered_rule")
        batch_op.drop_column("suggested_pattern")
    with op.batch_alter_table("executions", schema=None) as batch_op:
        batch_op.drop_column("remembered_rule")
        batch_op.drop_column("policy_reason")
