"""sandbox: the profile each execution ran with, and each session's own

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05 19:45:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("executions") as batch:
        batch.add_column(sa.Column("sandbox", sa.Text(), nullable=True))
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("sandbox", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("sandbox")
    with op.batch_alter_table("executions") as batch:
        batch.drop_column("sandbox")
