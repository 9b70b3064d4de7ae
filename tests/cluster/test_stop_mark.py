"""A replica's stop mark in its node row (store.mark_stopping), on both databases: its own
heartbeat leaves it alone while the stop lasts, and its next start clears it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlmodel import Session

from app.cluster import store
from app.store.db import make_engine
from app.store.migrate import upgrade_to_head
from tests.databases import ServerDatabase

T0 = datetime(2026, 12, 6, 20, 0, tzinfo=UTC)


def test_a_stop_mark_outlasts_heartbeats_and_ends_with_the_next_start(
    database: ServerDatabase, tmp_path: Path
) -> None:
    url = database.url or f"sqlite:///{tmp_path / 'shellgate.db'}"
    upgrade_to_head(url)
    engine = make_engine(url)
    try:
        with Session(engine) as session:

            def beat(seconds: int) -> None:
                store.heartbeat(
                    session,
                    node_id="node-a",
                    url="http://127.0.0.1:1",
                    version="0",
                    now=T0 + timedelta(seconds=seconds),
                )

            def stopping_since() -> datetime | None:
                node = store.get_node(session, node_id="node-a")
                assert node is not None
                return node.stopping_since

            beat(0)
            assert stopping_since() is None
            store.mark_stopping(session, node_id="node-a", now=T0 + timedelta(seconds=1))
            beat(2)  # the heartbeat goes on while the stop lasts
            assert stopping_since() is not None
            store.restarted(session, node_id="node-a", now=T0 + timedelta(seconds=3))
            assert stopping_since() is None
    finally:
        engine.dispose()
