"""Bring the schema to the head revision (what `shellgate serve` does first), importing Alembic
only when the database is behind: a start on a current schema reads one row
(`alembic_version`) and leaves Alembic, Mako and Pygments unimported (≈ 0.2 s and 10 MiB).
A database with no tables at all is not migrated but created from the models in one
transaction, the head revision recorded as Alembic records it (`create_schema_if_empty`: the
18 migrations took 0.2-0.6 s of a first start, bench/PROFILE.md); tests/test_fresh_schema.py
checks the two ways make the same schema. `shellgate serve` runs a due upgrade in a forked
child (`upgrade_in_child_if_behind`), so the server does not keep Alembic's ≈ 10 MiB after an
upgrade either."""

from __future__ import annotations

import os
import re
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    inspect,
)
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import SQLModel

import app.store.models  # noqa: F401  (registers the tables on SQLModel.metadata)
from app.store import crud
from app.store.db import make_engine

if TYPE_CHECKING:
    from alembic.config import Config

_APP = Path(__file__).resolve().parent.parent
# An installed wheel carries them as app/migrations; a checkout (editable install) keeps them
# in the repository's top-level migrations/.
_CANDIDATES = (_APP / "migrations", _APP.parent / "migrations")
# The two assignments every script in migrations/versions/ starts with.
_REVISION = re.compile(r"^revision(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", re.MULTILINE)
_DOWN_REVISION = re.compile(r"^down_revision(?::[^=]*)?=\s*(.+)$", re.MULTILINE)
_QUOTED = re.compile(r"['\"]([^'\"]+)['\"]")
# The table Alembic keeps its revision in, as it creates it (alembic.ddl.impl,
# `version_table_impl`: the primary key named `<table>_pkc`).
ALEMBIC_VERSION = Table(
    "alembic_version",
    MetaData(),
    Column("version_num", String(32), nullable=False),
    PrimaryKeyConstraint("version_num", name="alembic_version_pkc"),
)
# PostgreSQL: the transaction-level advisory lock that creating or migrating the schema holds
# (also taken by migrations/env.py), so that replicas starting together on one fresh database
# take turns, and each after the first finds the schema current. Any fixed 64-bit key.
SCHEMA_LOCK_KEY = 0x5348454C4C474154  # "SHELLGAT"


class MigrationFailedError(Exception):
    pass


def migrations_dir() -> Path:
    for candidate in _CANDIDATES:
        if (candidate / "env.py").is_file():
            return candidate
    raise FileNotFoundError(f"no Alembic migrations in {' or '.join(map(str, _CANDIDATES))}")


def alembic_config(database_url: str) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade_to_head(database_url: str) -> None:
    from alembic import command

    command.upgrade(alembic_config(database_url), "head")


def head_revisions() -> set[str]:
    """The revisions no script names as its `down_revision`, read from the scripts' text
    (tests/test_migrations.py checks the answer against Alembic's own)."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for script in (migrations_dir() / "versions").glob("*.py"):
        source = script.read_text()
        revision = _REVISION.search(source)
        if revision is None:
            continue
        revisions.add(revision.group(1))
        down = _DOWN_REVISION.search(source)
        if down is not None:
            parents.update(_QUOTED.findall(down.group(1)))
    return revisions - parents


def stored_revisions(engine: Engine) -> set[str]:
    """What `alembic_version` holds; empty for a database Alembic never touched.
    MigrationFailedError when the database cannot be reached at all."""
    try:
        connection = engine.connect()
    except SQLAlchemyError as error:
        raise MigrationFailedError(f"cannot reach the database: {_first_line(error)}") from error
    try:
        with connection:
            return crud.schema_revisions(connection)
    except SQLAlchemyError:
        return set()


def _first_line(error: SQLAlchemyError) -> str:
    """The driver's own message, first line (a host and port, never the URL's password)."""
    original = getattr(error, "orig", None)
    text = str(original if original is not None else error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def lock_schema(connection: Connection) -> None:
    """Wait for any other process creating or migrating this database, until the end of the
    connection's transaction (PostgreSQL; SQLite's writers take turns already)."""
    if connection.dialect.name == "postgresql":
        crud.lock_schema_postgres(connection, SCHEMA_LOCK_KEY)


def create_schema_if_empty(engine: Engine) -> bool:
    """On a database with no tables at all, create the models' tables and record the head
    revision(s) in `alembic_version`, in one transaction, without Alembic: what the migrations
    would have made (tests/test_fresh_schema.py), in ≈ 1/30 of the time. False, touching
    nothing, if the database has any table (it is migrated instead), also when another process
    created the schema first. MigrationFailedError if the database refused."""
    try:
        with engine.connect() as connection:
            if connection.dialect.name == "sqlite":
                # pysqlite opens no transaction before DDL: open one that holds the write
                # lock from the first look at the tables on.
                connection.exec_driver_sql("BEGIN IMMEDIATE")
            lock_schema(connection)
            if inspect(connection).get_table_names():
                connection.rollback()
                return False
            SQLModel.metadata.create_all(connection)
            ALEMBIC_VERSION.create(connection)
            crud.record_schema_revisions(connection, head_revisions())
            connection.commit()
    except SQLAlchemyError as error:
        raise MigrationFailedError(f"creating the schema failed: {_first_line(error)}") from error
    return True


def upgrade_if_behind(engine: Engine, database_url: str) -> bool:
    """Bring the database to the head unless it already stands there: create the schema if it
    has no tables, else run the migrations. True if either ran."""
    if stored_revisions(engine) == head_revisions():
        return False
    if not create_schema_if_empty(engine) and stored_revisions(engine) != head_revisions():
        upgrade_to_head(database_url)
    return True


def upgrade_in_child_if_behind(database_url: str) -> bool:
    """`upgrade_if_behind`, a migration in a forked child: Alembic's modules are loaded and
    freed there, not in the server (a database with no tables is created here, without them).
    Call it while the process has one thread (before the server starts), as a fork with other
    threads running may copy a lock one of them holds. True if the schema was created or
    migrated; MigrationFailedError if that failed (a migration's child printed why)."""
    engine = make_engine(database_url)
    try:
        if stored_revisions(engine) == head_revisions():
            return False
        if create_schema_if_empty(engine) or stored_revisions(engine) == head_revisions():
            return True
    finally:
        engine.dispose()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: migrate, report, and leave without running the parent's exits
        status = 1
        try:
            upgrade_to_head(database_url)
            status = 0
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
    _, wait_status = os.waitpid(pid, 0)
    exit_code = os.waitstatus_to_exitcode(wait_status)
    if exit_code != 0:
        raise MigrationFailedError(
            f"migrating the database failed (exit status {exit_code}; the error is above)"
        )
    return True
