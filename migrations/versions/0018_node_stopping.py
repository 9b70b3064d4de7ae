"""node stopping: a replica says in its row that its graceful stop has begun

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06 20:00:00.000000

A replica that got SIGTERM writes `stopping_since` before it stops listening, so that the
others stop forwarding to it what the database can answer (docs/operations.md, "Several
replicas"); its next start clears it. NULL: not stopping (every row until now).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("stopping_since", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("stopping_since")
