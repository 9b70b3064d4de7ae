"""Alembic environment: the URL comes from the caller (app.store.migrate) or from Settings."""

from __future__ import annotations

from typing import Any

from alembic import context
from sqlalchemy import Engine, engine_from_config, event, pool
from sqlmodel import SQLModel

import app.store.models  # noqa: F401  (registers the tables on SQLModel.metadata)
from app.store.migrate import lock_schema

config = context.config
target_metadata = SQLModel.metadata


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if url:
        return url
    from app.core.config import Settings

    return Settings().resolved_database_url


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def _batch_sqlite_syncs(engine: Engine) -> None:
    """SQLite in WAL mode with synchronous=NORMAL, as the server runs it (app/store/db.py):
    with the default (FULL), each of the migrations' ≈ 100 statements that commits waited for
    its own fsync, 0.5-0.9 s of a fresh data directory's first start on a loaded disk
    (bench/PROFILE.md, "Start-up: the first migration's fsyncs"). The checkpoint at the end
    writes the migrated schema to the database file before the server uses it."""

    def configure(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    event.listen(engine, "connect", configure)


def run_migrations_online() -> None:
    connectable = config.attributes.get("connection")
    if connectable is not None:
        context.configure(connection=connectable, target_metadata=target_metadata)
        with context.begin_transaction():
            lock_schema(connectable)
            context.run_migrations()
        return
    engine = engine_from_config(
        {"sqlalchemy.url": _url()}, prefix="sqlalchemy.", poolclass=pool.NullPool
    )
    sqlite = engine.dialect.name == "sqlite"
    if sqlite:
        _batch_sqlite_syncs(engine)
    with engine.connect() as connection:
        # render_as_batch lets ALTERs work on SQLite, which cannot alter columns in place.
        context.configure(
            connection=connection, target_metadata=target_metadata, render_as_batch=True
        )
        # The revision is read after the lock: a replica that waited for another's migration
        # (or schema creation, app/store/migrate.py) finds nothing left to run.
        with context.begin_transaction():
            lock_schema(connection)
            context.run_migrations()
        if sqlite:
            connection.exec_driver_sql("PRAGMA wal_checkpoint(FULL)")


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
