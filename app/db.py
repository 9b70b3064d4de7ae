"""Engine factory. SQLite gets the pragmas that make it a safe multi-threaded registry."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import anyio.to_thread
from sqlalchemy import Engine, event
from sqlmodel import Session, create_engine

T = TypeVar("T")


def _configure_sqlite(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # WAL lets readers (GET, list, long-poll) proceed while a writer commits; NORMAL is durable
    # across process crashes in WAL mode (only an OS crash can lose the last commits).
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    # Several threads write (request handlers, pump completions): wait instead of failing.
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 10},
            pool_size=8,
            max_overflow=16,
        )
        event.listen(engine, "connect", _configure_sqlite)
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


class Database:
    """Runs synchronous `crud` functions in worker threads so the event loop never blocks."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def run_sync(self, fn: Callable[..., T], /, **kwargs: Any) -> T:
        with Session(self.engine, expire_on_commit=False) as session:
            return fn(session, **kwargs)

    async def call(self, fn: Callable[..., T], /, **kwargs: Any) -> T:
        return await anyio.to_thread.run_sync(functools.partial(self.run_sync, fn, **kwargs))

    def dispose(self) -> None:
        self.engine.dispose()
