"""executions_created_index: the unfiltered list (newest first) walks an index at 100k+ rows

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05 20:25:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # `GET /v1/executions` for an admin orders by (created_at, id) with no owner: without this
    # index SQLite and PostgreSQL read and sort the whole table for each page.
    op.create_index("ix_executions_created_id", "executions", ["created_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_executions_created_id", table_name="executions")
