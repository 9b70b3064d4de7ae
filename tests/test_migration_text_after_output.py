"""Migration 0015: rows written before it held the inline output twice, in `output` and at the
head of `text`; the upgrade keeps it once, and the API shows those executions as it did. A
text that does not begin with its output (an approval's notice) stays whole, and the revision
goes back down to the duplicated form."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from alembic import command
from sqlalchemy import create_engine, inspect, text

from app.store.migrate import alembic_config
from tests.conftest import make_settings, run_foreground, serve
from tests.databases import ServerDatabase

COMMANDS = {
    "short": "printf 'one\\ntwo\\n'",
    "truncated": "seq 1 100000",
    "failed": "echo broken; exit 3",
    "silent": "true",
}
NOTICE = "Approved by carol; the session is created by the call that asked"


def shown(database: ServerDatabase, tmp_path: Path, ids: list[str]) -> dict[str, Any]:
    """Each execution as GET /v1/executions/{id} answers, from a server on `database`."""
    with serve(make_settings(tmp_path, database)) as live, live.client() as client:
        return {
            execution_id: client.get(f"/v1/executions/{execution_id}").json()
            for execution_id in ids
        }


def insert_notice_row(url: str) -> None:
    """A row whose text is a notice with no output before it, as a settled approval writes."""
    with create_engine(url).begin() as connection:
        connection.execute(
            text(
                "INSERT INTO executions (id, owner, command, original_command, cwd, state,"
                " mode, pty, timed_out, timeout_disabled, notices, total_bytes, total_lines,"
                " output_bytes, output_lines, elided_bytes, truncated, artifact_path, text,"
                " created_at, finished_at) VALUES ('ex_notice', 'alice', 'x', 'x', '/tmp',"
                " 'completed', 'foreground', :no, :no, :no, :notices, 0, 0, 0, 0, 0, :no, '/a',"
                " :text, :now, :now)"
            ),
            # Finished now: a start prunes what finished before the retention window.
            {"no": False, "notices": f'["{NOTICE}"]', "text": NOTICE, "now": datetime.now(UTC)},
        )


def stored_texts(url: str) -> dict[str, tuple[str | None, ...]]:
    engine = create_engine(url)
    columns = {column["name"] for column in inspect(engine).get_columns("executions")}
    split = ", text_after_output" if "text_after_output" in columns else ""
    with engine.connect() as connection:
        rows = connection.execute(text(f"SELECT id, output, text{split} FROM executions"))
        result = {row[0]: tuple(row[1:]) for row in rows}
    engine.dispose()
    return result


def test_upgrade_keeps_the_output_once_and_the_api_shows_the_same_executions(
    empty_database_url: str, tmp_path: Path, database_kind: str
) -> None:
    url = empty_database_url
    database = ServerDatabase(database_kind, url)
    with serve(make_settings(tmp_path / "first", database)) as live, live.client() as client:
        ids = {
            name: str(run_foreground(client, command)["id"]) for name, command in COMMANDS.items()
        }
    before = shown(database, tmp_path / "before", list(ids.values()))
    config = alembic_config(url)

    # Back to 0014: the rows as that revision's code wrote them, the output twice.
    command.downgrade(config, "0014")
    insert_notice_row(url)
    duplicated = stored_texts(url)
    for execution_id in ids.values():
        output, whole = duplicated[execution_id]
        assert whole == before[execution_id]["text"]
        assert output == before[execution_id]["output"]
    assert duplicated["ex_notice"] == (None, NOTICE)

    command.upgrade(config, "0015")

    once = stored_texts(url)
    for execution_id in ids.values():
        output, whole, after = once[execution_id]
        assert whole is None and after is not None
        # What is left beside the output: the footer, the wall time, the exit code.
        assert len(after) < 1024
        assert ((output or "").rstrip("\n") or "(no output)") + after == before[execution_id][
            "text"
        ]
    assert once["ex_notice"] == (None, NOTICE, None)
    after_upgrade = shown(database, tmp_path / "after", [*ids.values(), "ex_notice"])
    for execution_id in ids.values():
        assert after_upgrade[execution_id] == before[execution_id]
    assert after_upgrade["ex_notice"]["text"] == NOTICE

    command.downgrade(config, "0014")
    assert stored_texts(url) == duplicated
