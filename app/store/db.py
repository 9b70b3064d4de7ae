"""Engine factory. SQLite gets the pragmas that make it a safe multi-threaded registry."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy import Connection, Engine, event, make_url
from sqlalchemy.exc import DataError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as SQLAlchemyTimeoutError
from sqlmodel import Session, create_engine

from app.core.blocking import WorkerThreads
from app.core.errors import DatabaseUnavailableError, InvalidRequestError, StorageFullError
from app.store.outage import OutageLog

T = TypeVar("T")
# The first parameter says which door a crud function needs: an ORM Session or a Core
# Connection. Typing it lets mypy catch a Core statement handed to `call`, where nothing commits.
P = ParamSpec("P")
SQLITE_FULL = 13  # "database or disk is full"
POSTGRES_DISK_FULL = "53100"
CONNECT_TIMEOUT_SECONDS = 5
# The page cache of each SQLite connection, KiB (see _configure_sqlite).
SQLITE_CACHE_KIB = 512
# Each engine's connections: the pool kept, and how many more it opens under a burst.
SQLITE_POOL = (8, 16)
POSTGRES_POOL = (10, 20)
# The threads every database call runs on, shared by the process's engines: one per
# connection the larger pool can hold, so that no thread waits for a connection while a call
# that has one waits for a thread.
DATABASE_THREADS = WorkerThreads("shellgate-db", max(map(sum, (SQLITE_POOL, POSTGRES_POOL))))


def is_disk_full(error: Exception) -> bool:
    original = getattr(error, "orig", None)
    return (
        getattr(original, "sqlite_errorcode", None) == SQLITE_FULL
        or getattr(original, "sqlstate", None) == POSTGRES_DISK_FULL
    )


def _configure_sqlite(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # WAL lets readers (GET, list, long-poll) proceed while a writer commits; NORMAL is durable
    # across process crashes in WAL mode (only an OS crash can lose the last commits).
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    # Several threads write (request handlers, pump completions): wait instead of failing.
    cursor.execute("PRAGMA busy_timeout=10000")
    # Each connection's own page cache (SQLite's default: 2 MiB) fills as the database grows
    # and stays for the connection's life: with the pool's 8 + 16 connections that was most of
    # the RSS a soak left over its baseline (RELIABILITY.md, "Soak"). The OS page cache holds
    # the file anyway; a page missing here is a pread from it.
    cursor.execute(f"PRAGMA cache_size=-{SQLITE_CACHE_KIB}")
    cursor.close()


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 10},
            pool_size=SQLITE_POOL[0],
            max_overflow=SQLITE_POOL[1],
        )
        event.listen(engine, "connect", _configure_sqlite)
        return engine
    connect_args: dict[str, Any] = {}
    if "connect_timeout" not in make_url(url).query:
        # An unreachable server (no answer at all) fails the call after this, not never.
        connect_args["connect_timeout"] = CONNECT_TIMEOUT_SECONDS
    return create_engine(
        url,
        pool_pre_ping=True,
        pool_size=POSTGRES_POOL[0],
        max_overflow=POSTGRES_POOL[1],
        connect_args=connect_args,
    )


DATABASE_ERRORS = (OperationalError, InterfaceError, SQLAlchemyTimeoutError, DataError)


def as_app_error(error: Exception, outage: OutageLog | None = None) -> Exception:
    """A database that cannot be reached is DatabaseUnavailableError (503, retry), one out of
    space StorageFullError (507), a value it cannot hold InvalidRequestError (422): PostgreSQL
    refuses a NUL character in text (an id looked up, a name stored) where SQLite keeps it."""
    if is_disk_full(error):
        return StorageFullError()
    if isinstance(error, DataError):
        if "NUL" in str(error.orig):
            return InvalidRequestError("text must not contain a NUL character")
        return InvalidRequestError("the database cannot hold a value of this request")
    if outage is not None:
        outage.failed(error)
    return DatabaseUnavailableError()


class Database:
    """Runs synchronous `crud` functions in worker threads so the event loop never blocks."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # An embedded file answers as long as the process runs; its one failure that matters
        # before a spawn, a full disk, is the storage guard's. A server's must be asked.
        self._networked = engine.dialect.name != "sqlite"
        self.outage = OutageLog()

    def confirm_reachable(self) -> None:
        """Before a command runs: raise DatabaseUnavailableError unless the database answers,
        so that its record can be written. On a server, checking a connection out is the
        round trip (the pool pings each one it hands out); SQLite needs none. Blocking."""
        if not self._networked:
            return
        try:
            with self.engine.connect():
                pass
        except DATABASE_ERRORS as error:
            raise as_app_error(error, self.outage) from error
        self.outage.answered()

    def run_sync(
        self, fn: Callable[Concatenate[Session, P], T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        with Session(self.engine, expire_on_commit=False) as session:
            return fn(session, *args, **kwargs)

    def run_in_transaction(
        self, fn: Callable[Concatenate[Connection, P], T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """`fn(connection, **kwargs)` in one transaction (committed unless it raises): the Core
        path, for the statements every execution runs. Blocking: call it off the event loop."""
        try:
            with self.engine.begin() as connection:
                result = fn(connection, *args, **kwargs)
        except DATABASE_ERRORS as error:
            raise as_app_error(error, self.outage) from error
        self.outage.answered()
        return result

    async def call(
        self, fn: Callable[Concatenate[Session, P], T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """Run `fn(session, **kwargs)` on a database thread. A database that cannot be
        reached raises DatabaseUnavailableError (503, retry), one out of space
        StorageFullError (507)."""
        try:
            result = await DATABASE_THREADS.run(
                functools.partial(self.run_sync, fn, *args, **kwargs)
            )
        except DATABASE_ERRORS as error:
            raise as_app_error(error, self.outage) from error
        self.outage.answered()
        return result

    async def run(
        self, fn: Callable[Concatenate[Connection, P], T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """Run `fn(connection, **kwargs)` in one transaction on a database thread; errors as
        `call`'s."""
        return await DATABASE_THREADS.run(
            functools.partial(self.run_in_transaction, fn, *args, **kwargs)
        )

    def dispose(self) -> None:
        self.engine.dispose()
