"""text after output: each execution's text block kept without the inline output it repeats

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06 02:40:00.000000

A row held its inline output twice, in `output` and again at the head of `text` (938 MB for
8,620 executions after a soak). From here the row keeps what the text adds after the output in
`text_after_output` and `text` stays NULL (app/store/inline_text.py); the rows already stored
are split the same way, a text that does not begin with its output kept whole. SQLite reuses
the pages this frees for new rows; the file itself shrinks only with `VACUUM`
(docs/operations.md#data-directory-and-database).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Rows read at a time: a text is at most ~70 KiB plus its notices, so a batch stays a few MiB.
BATCH_ROWS = 200
_EXECUTIONS = sa.table(
    "executions",
    sa.column("id", sa.String()),
    sa.column("output", sa.Text()),
    sa.column("text", sa.Text()),
    sa.column("text_after_output", sa.Text()),
)


def _text_body(output: str | None) -> str:
    # The start of every text block, as app/store/inline_text.py has it today; copied so
    # that this revision means the same whatever that module becomes.
    return (output or "").rstrip("\n") or "(no output)"


def upgrade() -> None:
    with op.batch_alter_table("executions") as batch:
        batch.add_column(sa.Column("text_after_output", sa.Text(), nullable=True))
    connection = op.get_bind()
    split = (
        sa.update(_EXECUTIONS)
        .where(_EXECUTIONS.c.id == sa.bindparam("row_id"))
        .values(text=None, text_after_output=sa.bindparam("after"))
    )
    last_id = ""
    while True:
        # Keyset pages by id: every row is read once, whether it is split or kept whole.
        rows = connection.execute(
            sa.select(_EXECUTIONS.c.id, _EXECUTIONS.c.output, _EXECUTIONS.c.text)
            .where(_EXECUTIONS.c.text.is_not(None), _EXECUTIONS.c.id > last_id)
            .order_by(_EXECUTIONS.c.id)
            .limit(BATCH_ROWS)
        ).all()
        if not rows:
            return
        last_id = rows[-1].id
        splits = []
        for row in rows:
            body = _text_body(row.output)
            if row.text.startswith(body):
                splits.append({"row_id": row.id, "after": row.text[len(body) :]})
        if splits:
            connection.execute(split, splits)


def downgrade() -> None:
    connection = op.get_bind()
    join = (
        sa.update(_EXECUTIONS)
        .where(_EXECUTIONS.c.id == sa.bindparam("row_id"))
        .values(text=sa.bindparam("whole"))
    )
    last_id = ""
    while True:
        rows = connection.execute(
            sa.select(_EXECUTIONS.c.id, _EXECUTIONS.c.output, _EXECUTIONS.c.text_after_output)
            .where(_EXECUTIONS.c.text_after_output.is_not(None), _EXECUTIONS.c.id > last_id)
            .order_by(_EXECUTIONS.c.id)
            .limit(BATCH_ROWS)
        ).all()
        if not rows:
            break
        last_id = rows[-1].id
        connection.execute(
            join,
            [
                {"row_id": row.id, "whole": _text_body(row.output) + row.text_after_output}
                for row in rows
            ],
        )
    with op.batch_alter_table("executions") as batch:
        batch.drop_column("text_after_output")
