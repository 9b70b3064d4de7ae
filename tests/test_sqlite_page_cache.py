"""Each SQLite connection's own page cache is kept small (app/store/db.py): with the pool's
connections it was most of the RSS a soak left behind (RELIABILITY.md, "Soak")."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from app.store.db import SQLITE_CACHE_KIB, make_engine


def test_every_pooled_sqlite_connection_gets_the_small_page_cache(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'cache.db'}")
    try:
        with engine.connect() as first, engine.connect() as second:
            for connection in (first, second):
                cache_size = connection.execute(text("PRAGMA cache_size")).scalar()
                assert cache_size == -SQLITE_CACHE_KIB
    finally:
        engine.dispose()
    assert SQLITE_CACHE_KIB < 2000  # below SQLite's default of 2,000 KiB
