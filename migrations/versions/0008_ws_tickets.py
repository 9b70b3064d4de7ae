"""ws_tickets: browser WebSocket tickets in the database, redeemable once on any replica

Revision ID: 0008
Revises: 0006
Create Date: 2026-12-01 03:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0008"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "ws_tickets",
        sa.Column("digest", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("owner", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("role", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("digest"),
    )
    op.create_index("ix_ws_tickets_expires_at", "ws_tickets", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_ws_tickets_expires_at", table_name="ws_tickets")
    op.drop_table("ws_tickets")
