"""Rows of replicas long gone are forgotten, on PostgreSQL (the shared database), unless they
still hold work: a running or awaiting execution, a job slot, or an open session (not a lost
one). Each case is
one row of one silent node; the node's own row and a recently silent one always stay."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine
from sqlmodel import Session, select

from app.cluster import store
from app.store.db import make_engine
from app.store.migrate import upgrade_to_head
from app.store.models import Execution, JobSlot, Node, ShellSession
from tests.cluster.replicas import fresh_database

pytestmark = pytest.mark.postgres

NOW = datetime.now(UTC)
LONG_AGO = NOW - timedelta(days=30)


@pytest.fixture
def engine() -> Iterator[Engine]:
    with fresh_database() as url:
        upgrade_to_head(url)
        engine = make_engine(url)
        try:
            yield engine
        finally:
            engine.dispose()


def _node(node_id: str, last_heartbeat: datetime) -> Node:
    return Node(id=node_id, version="0", started_at=last_heartbeat, last_heartbeat=last_heartbeat)


def _execution(execution_id: str, node: str, state: str) -> Execution:
    return Execution(
        id=execution_id,
        owner="alice",
        command="true",
        original_command="true",
        cwd="/",
        state=state,
        artifact_path=f"/nonexistent/{execution_id}.log",
        node=node,
    )


def test_silent_nodes_holding_nothing_are_forgotten_the_others_kept(engine: Engine) -> None:
    with Session(engine) as session:
        for node_id in (
            "me",
            "idle",
            "finished-only",
            "running",
            "awaiting",
            "slot",
            "session",
            "closed-session",
            "lost-session",
        ):
            session.add(_node(node_id, LONG_AGO))
        session.add(_node("recent", NOW - timedelta(minutes=5)))
        session.add(_execution("ex_done", "finished-only", "completed"))
        session.add(_execution("ex_run", "running", "running"))
        session.add(_execution("ex_wait", "awaiting", "awaiting_approval"))
        session.add(JobSlot(execution_id="ex_slot", node="slot", acquired_at=LONG_AGO))
        for session_id, node, deleted_at, lost_at in (
            ("ss_open", "session", None, None),
            ("ss_closed", "closed-session", LONG_AGO, None),
            ("ss_lost", "lost-session", None, LONG_AGO),
        ):
            session.add(
                ShellSession(
                    id=session_id,
                    owner="alice",
                    cwd="/",
                    timeout_ms=1000,
                    node=node,
                    deleted_at=deleted_at,
                    lost_at=lost_at,
                )
            )
        session.commit()

        forgotten = store.forget_silent_nodes(
            session, me="me", silent_before=NOW - timedelta(days=7)
        )
        assert forgotten == ["closed-session", "finished-only", "idle", "lost-session"]
        kept = set(session.exec(select(Node.id)).all())
    assert kept == {"me", "recent", "running", "awaiting", "slot", "session"}


def test_the_open_sessions_of_a_dead_node_are_lost_once(engine: Engine) -> None:
    with Session(engine) as session:
        session.add(_node("me", NOW))
        session.add(_node("dead", NOW - timedelta(minutes=5)))
        for session_id, node, deleted_at in (
            ("ss_dead_open", "dead", None),
            ("ss_dead_closed", "dead", LONG_AGO),
            ("ss_mine", "me", None),
        ):
            session.add(
                ShellSession(
                    id=session_id,
                    owner="alice",
                    cwd="/",
                    timeout_ms=1000,
                    node=node,
                    deleted_at=deleted_at,
                )
            )
        session.commit()
        cutoff = NOW - timedelta(minutes=1)
        assert store.lose_sessions_of_dead_nodes(session, me="me", cutoff=cutoff, now=NOW) == 1
        assert store.lose_sessions_of_dead_nodes(session, me="me", cutoff=cutoff, now=NOW) == 0
        lost = set(session.exec(select(ShellSession.id).where(ShellSession.lost_at != None)))  # noqa: E711
    assert lost == {"ss_dead_open"}
