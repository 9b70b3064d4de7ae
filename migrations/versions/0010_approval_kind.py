"""approval_kind: what an approval asks (command, file, sandbox) and a sandbox request's body

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05 19:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("approvals", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "kind",
                sqlmodel.sql.sqltypes.AutoString(length=16),
                nullable=False,
                server_default="command",
            )
        )
        batch_op.add_column(sa.Column("sandbox_request", sa.Text(), nullable=True))
    # The approvals anchored by a file operation were always file approvals.
    op.execute(
        "UPDATE approvals SET kind = 'file' WHERE id IN "
        "(SELECT approval_id FROM file_operations WHERE approval_id IS NOT NULL)"
    )


def downgrade() -> None:
    with op.batch_alter_table("approvals", schema=None) as batch_op:
        batch_op.drop_column("sandbox_request")
        batch_op.drop_column("kind")
