"""A database with no tables is created from the models (app/store/migrate.py,
`create_schema_if_empty`) instead of migrated: the two ways must leave the same database, on
each kind, down to what `compare_metadata` does not look at (server defaults, constraint names,
indexes, SQLite's persistent pragmas, the rows a migration writes), and the created one must
take later migrations as the migrated one does. Replicas starting together on one fresh
database create it once."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, create_engine, inspect, text

from app.store.db import make_engine
from app.store.migrate import (
    SCHEMA_LOCK_KEY,
    create_schema_if_empty,
    head_revisions,
    migrations_dir,
    stored_revisions,
    upgrade_to_head,
)
from tests.databases import PostgresDatabases


@contextmanager
def empty_databases(
    database_kind: str, tmp_path: Path, request: pytest.FixtureRequest, count: int
) -> Iterator[list[str]]:
    """`count` URLs of databases with no tables yet, of this half's kind."""
    if database_kind == "sqlite":
        yield [f"sqlite:///{tmp_path / f'empty-{number}.db'}" for number in range(count)]
        return
    postgres: PostgresDatabases = request.getfixturevalue("postgres_databases")
    made = [postgres.create(migrated=False) for _ in range(count)]
    try:
        yield [str(database.url) for database in made]
    finally:
        for database in made:
            postgres.drop(database)


def created(url: str) -> None:
    engine = make_engine(url)  # the server's engine: on SQLite, WAL as `serve` leaves it
    try:
        assert create_schema_if_empty(engine) is True
    finally:
        engine.dispose()


# --- the dump ---------------------------------------------------------------------------------


def _split_top_level(body: str) -> list[str]:
    """A CREATE TABLE's items, split at the commas outside parentheses."""
    items, depth, start = [], 0, 0
    for index, char in enumerate(body):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(body[start:index])
            start = index + 1
    items.append(body[start:])
    return [" ".join(item.split()) for item in items]


def _normalised_sql(sql: str) -> Any:
    """SQLite keeps each object's CREATE statement as it was last written: a batch migration's
    copy quotes the table's name, and a column added later comes last. Neither means anything
    (every statement names its columns), so the name is unquoted and the items sorted; their
    text (types, NOT NULL, DEFAULT, constraint names, references) is compared as it is."""
    sql = sql.replace('"', "")
    head, _, body = sql.partition("(")
    if not head.startswith("CREATE TABLE"):
        return " ".join(sql.split())
    return (" ".join(head.split()), sorted(_split_top_level(body.rstrip().removesuffix(")"))))


SQLITE_PRAGMAS = ("journal_mode", "user_version", "application_id", "auto_vacuum", "encoding")

POSTGRES_QUERIES = {
    # By name, not position: as on SQLite, a column a migration added comes last.
    "columns": """
        SELECT table_name, column_name, data_type, character_maximum_length,
               numeric_precision, datetime_precision, is_nullable, column_default,
               is_identity, collation_name
        FROM information_schema.columns WHERE table_schema = current_schema()
        ORDER BY table_name, column_name""",
    "constraints": """
        SELECT conrelid::regclass::text, conname, contype, pg_get_constraintdef(oid),
               condeferrable, condeferred
        FROM pg_constraint WHERE connamespace = current_schema()::text::regnamespace
        ORDER BY 1, 2""",
    "indexes": """
        SELECT tablename, indexname, indexdef FROM pg_indexes
        WHERE schemaname = current_schema() ORDER BY 1, 2""",
    "sequences": """
        SELECT sequence_name, data_type, start_value, minimum_value, maximum_value, increment
        FROM information_schema.sequences WHERE sequence_schema = current_schema()
        ORDER BY 1""",
    "sequence owners": """
        SELECT seq.relname, tab.relname, att.attname
        FROM pg_depend dep
        JOIN pg_class seq ON seq.oid = dep.objid AND seq.relkind = 'S'
        JOIN pg_class tab ON tab.oid = dep.refobjid
        JOIN pg_attribute att ON att.attrelid = tab.oid AND att.attnum = dep.refobjsubid
        WHERE seq.relnamespace = current_schema()::text::regnamespace ORDER BY 1""",
    "other objects": """
        SELECT relname, relkind FROM pg_class
        WHERE relnamespace = current_schema()::text::regnamespace AND relkind NOT IN ('r', 'i', 'S')
        ORDER BY 1""",
    "triggers": """
        SELECT tgrelid::regclass::text, tgname FROM pg_trigger
        WHERE NOT tgisinternal ORDER BY 1, 2""",
}


def _contents(connection: Connection) -> dict[str, list[tuple[Any, ...]]]:
    return {
        table: sorted(
            (tuple(row) for row in connection.execute(text(f"SELECT * FROM {table}"))), key=repr
        )
        for table in sorted(inspect(connection).get_table_names())
    }


def dump(url: str) -> dict[str, Any]:
    """Everything the database holds, in a form two ways of making it can be compared by."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            if engine.dialect.name == "sqlite":
                schema: dict[str, Any] = {
                    "objects": sorted(
                        (kind, name, table, _normalised_sql(sql) if sql else None)
                        for kind, name, table, sql in connection.exec_driver_sql(
                            "SELECT type, name, tbl_name, sql FROM sqlite_master"
                        )
                    ),
                    "pragmas": {
                        pragma: connection.exec_driver_sql(f"PRAGMA {pragma}").scalar()
                        for pragma in SQLITE_PRAGMAS
                    },
                }
            else:
                schema = {
                    name: [tuple(row) for row in connection.execute(text(query))]
                    for name, query in POSTGRES_QUERIES.items()
                }
            schema["contents"] = _contents(connection)
    finally:
        engine.dispose()
    return schema


# --- the same database ------------------------------------------------------------------------


def test_a_created_schema_is_the_migrated_one(
    database_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with empty_databases(database_kind, tmp_path, request, 2) as (migrated, made):
        upgrade_to_head(migrated)
        created(made)
        expected = dump(migrated)
        assert expected["contents"]["alembic_version"] == [
            (revision,) for revision in sorted(head_revisions())
        ]
        if database_kind == "sqlite":
            assert expected["pragmas"]["journal_mode"] == "wal"
        assert dump(made) == expected


def test_a_database_with_any_table_is_left_to_the_migrations(
    database_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with empty_databases(database_kind, tmp_path, request, 1) as (url,):
        engine = make_engine(url)
        try:
            with engine.begin() as connection:
                connection.execute(text("CREATE TABLE unrelated (x INTEGER)"))
            assert create_schema_if_empty(engine) is False
            assert inspect(engine).get_table_names() == ["unrelated"]
        finally:
            engine.dispose()


LATER_MIGRATION = '''
"""A migration written after the database was created: SQLite copies approvals into a new
table (`recreate="always"`), which reflects its constraints' names and server defaults."""

import sqlalchemy as sa
from alembic import op

revision = "later"
down_revision = {heads!r}


def upgrade() -> None:
    with op.batch_alter_table("approvals", recreate="always") as batch:
        batch.add_column(sa.Column("later", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("approvals", recreate="always") as batch:
        batch.drop_column("later")
'''


def test_a_created_schema_takes_later_migrations(
    database_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Alembic goes on from the recorded head as from its own: a new migration up and down, and
    down through the ones that drop by name what the models only name to match (0016's
    foreign key), then up again."""
    from alembic import command
    from alembic.config import Config

    scripts = tmp_path / "migrations"
    shutil.copytree(migrations_dir(), scripts, ignore=shutil.ignore_patterns("__pycache__"))
    (heads,) = head_revisions()
    (scripts / "versions" / "9999_later.py").write_text(LATER_MIGRATION.format(heads=heads))

    def config(url: str) -> Config:
        alembic = Config()
        alembic.set_main_option("script_location", str(scripts))
        alembic.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
        return alembic

    with empty_databases(database_kind, tmp_path, request, 2) as (migrated, made):
        upgrade_to_head(migrated)
        created(made)
        steps: list[Callable[[Config], None]] = [
            lambda alembic: command.upgrade(alembic, "head"),
            lambda alembic: command.downgrade(alembic, "-1"),
            lambda alembic: command.downgrade(alembic, "0015"),
            lambda alembic: command.upgrade(alembic, "head"),
        ]
        for step in steps:
            step(config(migrated))
            step(config(made))
            assert dump(made) == dump(migrated)
        assert dump(made)["contents"]["alembic_version"] == [("later",)]


# --- replicas starting together ----------------------------------------------------------------


@contextmanager
def schema_lock_held(url: str) -> Iterator[Callable[[int], None]]:
    """Hold what a schema creation waits for (PostgreSQL: the advisory lock; SQLite: the write
    lock) until the block ends; yields a wait for that many others to queue behind it."""
    engine = make_engine(url)
    connection = engine.connect()
    try:
        if engine.dialect.name == "sqlite":
            connection.exec_driver_sql("BEGIN IMMEDIATE")

            def queued(_count: int) -> None:
                time.sleep(0.5)  # SQLite shows no waiters: give them time to reach the lock

        else:
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK_KEY})

            def queued(count: int) -> None:
                waiting = text(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                    " AND database = (SELECT oid FROM pg_database"
                    " WHERE datname = current_database())"
                )
                deadline = time.monotonic() + 30
                with engine.connect() as watcher:
                    while watcher.execute(waiting).scalar() != count:
                        assert time.monotonic() < deadline, "the others never queued"
                        time.sleep(0.02)  # polling another connection's state

        yield queued
        connection.commit()
    finally:
        connection.close()
        engine.dispose()


def test_replicas_starting_together_create_the_schema_once(
    database_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with empty_databases(database_kind, tmp_path, request, 1) as (url,):
        engine = make_engine(url)
        results: list[bool | BaseException] = []

        def start() -> None:
            try:
                results.append(create_schema_if_empty(engine))
            except BaseException as error:  # reported by the assertion below
                results.append(error)

        try:
            with schema_lock_held(url) as queued:
                threads = [threading.Thread(target=start) for _ in range(2)]
                for thread in threads:
                    thread.start()
                queued(2)
            for thread in threads:
                thread.join(30)
            assert sorted(results, key=repr) == [False, True]  # one created, one found it
            assert stored_revisions(engine) == head_revisions()
        finally:
            engine.dispose()


MIGRATE = """
import sys
from app.store.migrate import upgrade_to_head
upgrade_to_head(sys.argv[1])
"""


def test_replicas_migrating_together_take_turns(
    database_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Alembic's own way (a database behind, or an older shellgate on a fresh one) takes the
    same lock on PostgreSQL: the second reads the revision the first left, and runs nothing,
    where before it failed on a table the first had created."""
    if database_kind == "sqlite":
        pytest.skip("SQLite's migrations take turns on its write lock already")
    with empty_databases(database_kind, tmp_path, request, 1) as (url,):
        with schema_lock_held(url) as queued:
            migrations = [
                subprocess.Popen(
                    [sys.executable, "-c", MIGRATE, url],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for _ in range(2)
            ]
            queued(2)
        for migration in migrations:
            _, stderr = migration.communicate(timeout=120)
            assert migration.returncode == 0, stderr
        engine = create_engine(url)
        try:
            assert stored_revisions(engine) == head_revisions()
        finally:
            engine.dispose()
