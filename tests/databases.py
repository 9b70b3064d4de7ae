"""The databases the suite runs its servers on: SQLite (the default, a file in each server's
data directory) and PostgreSQL (a database of its own per server, copied from a template that
is migrated once per session, and dropped afterwards).

tests/conftest.py turns these into the `database` fixtures; this module knows nothing of pytest
so a multi-replica test can also use it to put several servers on one database."""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, make_url, text

from app.store.migrate import upgrade_to_head

POSTGRES_URL = os.environ.get(
    "SHELLGATE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
POINT_AT_POSTGRES = (
    "start one, or point SHELLGATE_TEST_POSTGRES_URL at a PostgreSQL server whose user may "
    "CREATE DATABASE (default postgresql+psycopg://postgres@127.0.0.1:5432/test)"
)


@dataclass(frozen=True)
class ServerDatabase:
    """Where one test server keeps its registry. `url` None: SQLite in its data directory."""

    kind: str  # "sqlite" or "postgres"
    url: str | None

    def settings(self) -> dict[str, Any]:
        """The Settings fields that put a server on this database."""
        return {"database_url": self.url} if self.url else {}

    def environment(self) -> dict[str, str]:
        """The same, for a server started as a process (`python -m app serve`)."""
        return {"SHELLGATE_DATABASE_URL": self.url} if self.url else {}

    def engine(self, data_dir: Path) -> Engine:
        """An engine on the database a server with `data_dir` uses, to look behind the API."""
        return create_engine(self.url or f"sqlite:///{data_dir / 'shellgate.db'}")


SQLITE = ServerDatabase("sqlite", None)

# What `PostgresDatabases` names its databases: the run's pid, a tag, then the template or a number.
RUN_DATABASE = re.compile(r"shellgate_test_(?P<pid>[0-9]+)_[0-9a-f]{6}_(?:template|[0-9]+)")
LOOPBACK_HOSTS = {None, "", "localhost", "127.0.0.1", "::1"}


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


@functools.cache
def postgres_unreachable_reason() -> str | None:
    """None when PostgreSQL at SHELLGATE_TEST_POSTGRES_URL answers, else why not (asked once)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return f"psycopg is not installed (pip install -e '.[dev]'); {POINT_AT_POSTGRES}"
    engine = create_engine(POSTGRES_URL, connect_args={"connect_timeout": 3})
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        return f"no PostgreSQL at {POSTGRES_URL} ({first_line}); {POINT_AT_POSTGRES}"
    finally:
        engine.dispose()
    return None


class PostgresDatabases:
    """Databases on the PostgreSQL server, named after this test run (pid and a random tag, so
    several runs on one server never meet). `CREATE DATABASE ... TEMPLATE` copies the migrated
    template in tens of milliseconds, where migrating each database would take seconds."""

    def __init__(self, admin_url: str = POSTGRES_URL) -> None:
        self._admin_url = make_url(admin_url)
        self._admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
        self._prefix = f"shellgate_test_{os.getpid()}_{secrets.token_hex(3)}"
        self._numbers = itertools.count(1)
        self._template = f"{self._prefix}_template"
        self.drop_orphans()
        self._execute(f'CREATE DATABASE "{self._template}"')
        try:
            upgrade_to_head(self._url_of(self._template))
        except BaseException:
            self.close()
            raise

    def drop_orphans(self) -> list[str]:
        """Drop the databases of earlier runs that were killed before their own `close` (their
        pid is gone), and return their names. Only names this class makes are candidates, and
        only on a server on this machine, where a run's pid means this machine's process."""
        if self._admin_url.host not in LOOPBACK_HOSTS:
            return []
        with self._admin.connect() as connection:
            names = connection.execute(
                text("SELECT datname FROM pg_database WHERE datname LIKE 'shellgate_test_%'")
            ).scalars()
            orphans = [
                name
                for name in names
                if (run := RUN_DATABASE.fullmatch(name)) is not None
                and not process_alive(int(run["pid"]))
            ]
        for name in orphans:
            self._execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        return orphans

    def _execute(self, statement: str) -> None:
        with self._admin.connect() as connection:
            connection.execute(text(statement))

    def _url_of(self, name: str) -> str:
        return self._admin_url.set(database=name).render_as_string(hide_password=False)

    def create(self, *, migrated: bool = True) -> ServerDatabase:
        """A new database without rows, migrated unless asked not to; `drop` it when done."""
        name = f"{self._prefix}_{next(self._numbers)}"
        template = f' TEMPLATE "{self._template}"' if migrated else ""
        self._execute(f'CREATE DATABASE "{name}"{template}')
        return ServerDatabase("postgres", self._url_of(name))

    def drop(self, database: ServerDatabase) -> None:
        """Drop it, ending the sessions a server (or a test) may still hold on it."""
        assert database.url is not None
        name = make_url(database.url).database
        self._execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    @contextlib.contextmanager
    def database(self, *, migrated: bool = True) -> Iterator[ServerDatabase]:
        database = self.create(migrated=migrated)
        try:
            yield database
        finally:
            self.drop(database)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._execute(f'DROP DATABASE IF EXISTS "{self._template}" WITH (FORCE)')
        self._admin.dispose()


class Databases:
    """Fresh databases of one kind for the servers of one fixture scope (each server its own,
    as each has its own data dir), all dropped at `close`."""

    def __init__(self, kind: str, postgres: PostgresDatabases | None) -> None:
        assert (kind == "postgres") == (postgres is not None)
        self.kind = kind
        self._postgres = postgres
        self._made: list[ServerDatabase] = []

    def new(self) -> ServerDatabase:
        if self._postgres is None:
            return SQLITE
        database = self._postgres.create()
        self._made.append(database)
        return database

    def close(self) -> None:
        assert self._postgres is not None or not self._made
        while self._made:
            self._postgres.drop(self._made.pop())  # type: ignore[union-attr]


if __name__ == "__main__":  # `.ci/run`: is the PostgreSQL half of the suite able to run?
    import sys

    unreachable = postgres_unreachable_reason()
    print(unreachable or f"PostgreSQL at {POSTGRES_URL} answers")
    sys.exit(1 if unreachable else 0)
