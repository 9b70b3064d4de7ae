"""files: the record of every read, write and stat through the files API

Revision ID: 0007
Revises: 0004
Create Date: 2026-12-01 00:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0007"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "file_operations",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("owner", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("op", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("resolved_path", sa.Text(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=True),
        sa.Column("mode", sa.Integer(), nullable=True),
        sa.Column("sha256", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True),
        sa.Column("verdict", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("state", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("approval_id", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True),
        sa.Column("execution_id", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("file_operations", schema=None) as batch_op:
        batch_op.create_index(
            "ix_file_operations_owner_created", ["owner", "created_at"], unique=False
        )
        batch_op.create_index("ix_file_operations_approval", ["approval_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("file_operations", schema=None) as batch_op:
        batch_op.drop_index("ix_file_operations_approval")
        batch_op.drop_index("ix_file_operations_owner_created")
    op.drop_table("file_operations")
