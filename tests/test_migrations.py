"""The Alembic migrations and the SQLModel tables describe the same schema, on each database
(conftest runs the test on SQLite and on PostgreSQL)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine
from sqlmodel import SQLModel

import app.store.models  # noqa: F401
from app.store.migrate import upgrade_to_head


def assert_schema_matches(url: str) -> None:
    upgrade_to_head(url)
    engine = create_engine(url)
    with engine.connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), SQLModel.metadata)
    engine.dispose()
    assert diff == []


def test_the_migrated_schema_matches_the_models(empty_database_url: str) -> None:
    assert_schema_matches(empty_database_url)


def test_the_head_read_from_the_scripts_is_alembics_head() -> None:
    from alembic.script import ScriptDirectory

    from app.store.migrate import alembic_config, head_revisions

    scripts = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert head_revisions() == set(scripts.get_heads())


def test_migrations_run_only_when_the_database_is_behind(tmp_path: Path) -> None:
    from alembic import command

    from app.store.migrate import (
        alembic_config,
        head_revisions,
        stored_revisions,
        upgrade_if_behind,
    )

    url = f"sqlite:///{tmp_path / 'behind.db'}"
    engine = create_engine(url)
    try:
        assert stored_revisions(engine) == set()  # never migrated
        assert upgrade_if_behind(engine, url) is True
        assert stored_revisions(engine) == head_revisions()
        assert upgrade_if_behind(engine, url) is False  # at the head: nothing runs
        command.downgrade(alembic_config(url), "-1")
        assert stored_revisions(engine) != head_revisions()
        assert upgrade_if_behind(engine, url) is True
        assert stored_revisions(engine) == head_revisions()
    finally:
        engine.dispose()


def test_sqlite_migrates_in_wal_with_normal_syncs(tmp_path: Path) -> None:
    """Every statement of the migrations runs on a connection in WAL mode with
    synchronous=NORMAL (1), as the server's own, not the default FULL (2) that waited for an
    fsync per commit."""
    from sqlalchemy import Engine, event

    seen: set[tuple[str, int]] = set()

    def record(connection: Any, *_: Any) -> None:
        raw = connection.connection.dbapi_connection
        mode = raw.execute("PRAGMA journal_mode").fetchone()[0]
        seen.add((mode, raw.execute("PRAGMA synchronous").fetchone()[0]))

    database = f"sqlite:///{tmp_path / 'fresh.db'}"  # never opened by a server: no WAL yet
    event.listen(Engine, "before_cursor_execute", record)
    try:
        upgrade_to_head(database)
    finally:
        event.remove(Engine, "before_cursor_execute", record)
    assert seen == {("wal", 1)}
    assert_schema_matches(database)
