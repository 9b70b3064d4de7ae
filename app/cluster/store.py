"""The cluster's SQL: node heartbeats, the shared job slots, who owns what, and the work a
dead replica left behind. Like `app/store/crud.py`, plain synchronous functions over a Session
(callers go through `Database.call`); portable between SQLite and PostgreSQL except where a
PostgreSQL-only statement says so."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import DateTime, String, delete, func, literal, or_, text, update
from sqlmodel import Session, col, select
from sqlmodel.sql.expression import SelectOfScalar

from app.store.models import (
    Approval,
    ApprovalState,
    Execution,
    ExecutionState,
    FileOperation,
    JobSlot,
    Node,
    ShellSession,
)

NOTIFY_CHANNEL = "shellgate_events"


def _is_postgres(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def _upsert_dialect(session: Session) -> Any:
    """The dialect module whose `insert` has ON CONFLICT, imported here: the PostgreSQL dialect
    (2 MiB) stays out of a server on SQLite (tests/test_lazy_startup.py)."""
    if _is_postgres(session):
        from sqlalchemy.dialects import postgresql

        return postgresql
    from sqlalchemy.dialects import sqlite

    return sqlite


def heartbeat(
    session: Session, *, node_id: str, url: str | None, version: str, now: datetime
) -> None:
    """Register the node, or refresh its heartbeat (and URL, after a restart)."""
    values = {"id": node_id, "url": url, "version": version, "started_at": now}
    dialect = _upsert_dialect(session)
    statement = dialect.insert(Node).values(**values, last_heartbeat=now)
    statement = statement.on_conflict_do_update(
        index_elements=["id"], set_={"url": url, "version": version, "last_heartbeat": now}
    )
    session.execute(statement)
    session.commit()


def restarted(session: Session, *, node_id: str, now: datetime) -> None:
    """A new run of the node: started now, and no longer stopping (its last run's mark)."""
    session.execute(
        update(Node).where(col(Node.id) == node_id).values(started_at=now, stopping_since=None)
    )
    session.commit()


def mark_stopping(session: Session, *, node_id: str, now: datetime) -> None:
    """The node's graceful stop has begun: the others stop forwarding to it what the database
    answers (app/cluster/forwarding.py). The heartbeat leaves the mark alone."""
    session.execute(update(Node).where(col(Node.id) == node_id).values(stopping_since=now))
    session.commit()


def list_nodes(session: Session) -> list[Node]:
    return list(session.exec(select(Node).order_by(col(Node.id))).all())


def get_node(session: Session, *, node_id: str) -> Node | None:
    return session.get(Node, node_id)


def _dead_nodes(cutoff: datetime, me: str) -> SelectOfScalar[str]:
    return select(Node.id).where(col(Node.last_heartbeat) < cutoff, col(Node.id) != me)


def running_on_dead_nodes(session: Session, *, me: str, cutoff: datetime) -> list[Execution]:
    """Executions recorded `running` on replicas silent since `cutoff`."""
    query = select(Execution).where(
        col(Execution.state) == ExecutionState.running.value,
        col(Execution.node).in_(_dead_nodes(cutoff, me)),
    )
    return list(session.exec(query).all())


def lose_sessions_of_dead_nodes(
    session: Session, *, me: str, cutoff: datetime, now: datetime
) -> int:
    """Open sessions whose shell lived on a replica silent since `cutoff` are lost, for good:
    their state went with it (its data dir), and a replica that returns does not serve them
    again."""
    result = session.execute(
        update(ShellSession)
        .where(
            col(ShellSession.node).in_(_dead_nodes(cutoff, me)),
            col(ShellSession.deleted_at).is_(None),
            col(ShellSession.lost_at).is_(None),
        )
        .values(lost_at=now)
    )
    session.commit()
    return int(getattr(result, "rowcount", 0) or 0)


def lose_session(session: Session, *, session_id: str, node_id: str, now: datetime) -> None:
    """One session of a replica found dead before the heartbeat loop got to it: lost now."""
    session.execute(
        update(ShellSession)
        .where(
            col(ShellSession.id) == session_id,
            col(ShellSession.node) == node_id,
            col(ShellSession.lost_at).is_(None),
        )
        .values(lost_at=now)
    )
    session.commit()


def release_slots_of_dead_nodes(session: Session, *, me: str, cutoff: datetime) -> int:
    result = session.execute(delete(JobSlot).where(col(JobSlot.node).in_(_dead_nodes(cutoff, me))))
    session.commit()
    return int(getattr(result, "rowcount", 0) or 0)


def forget_silent_nodes(session: Session, *, me: str, silent_before: datetime) -> list[str]:
    """Delete the rows of replicas silent since `silent_before` that hold nothing any more: no
    execution running or awaiting approval (the takeover and the approvals' fallback find
    those through the row), no job slot, no session still open. Replicas come and go (a pod
    with a fresh data dir is a new node): their rows would otherwise pile up for ever."""
    holds_work = (
        select(Execution.id)
        .where(
            col(Execution.node) == col(Node.id),
            col(Execution.state).in_(
                (ExecutionState.running.value, ExecutionState.awaiting_approval.value)
            ),
        )
        .exists()
    )
    holds_slot = select(JobSlot.execution_id).where(col(JobSlot.node) == col(Node.id)).exists()
    holds_session = (
        select(ShellSession.id)
        .where(
            col(ShellSession.node) == col(Node.id),
            col(ShellSession.deleted_at).is_(None),
            col(ShellSession.lost_at).is_(None),
        )
        .exists()
    )
    result = session.execute(
        delete(Node)
        .where(
            col(Node.last_heartbeat) < silent_before,
            col(Node.id) != me,
            ~holds_work,
            ~holds_slot,
            ~holds_session,
        )
        .returning(col(Node.id))
    )
    forgotten = sorted(str(row[0]) for row in result)
    session.commit()
    return forgotten


def release_slots_of(session: Session, *, node_id: str) -> None:
    """At start: the slots a previous run of this node held are free (its jobs are lost)."""
    session.execute(delete(JobSlot).where(col(JobSlot.node) == node_id))
    session.commit()


# --- the job cap across replicas -------------------------------------------------------------


def acquire_job_slot(
    session: Session, *, execution_id: str, node_id: str, cap: int, now: datetime
) -> bool:
    """Take a job slot if fewer than `cap` are taken, as one conditional INSERT … SELECT.

    On PostgreSQL a transaction-scoped advisory lock first serialises every replica's
    acquisitions, so the count the INSERT sees is not stale (READ COMMITTED alone would let
    two transactions count the same rows). SQLite serialises writers itself; it is a single
    node's database anyway."""
    if _is_postgres(session):
        session.execute(text("SELECT pg_advisory_xact_lock(hashtext('shellgate.job-slots'))"))
    taken = select(func.count()).select_from(JobSlot).scalar_subquery()
    dialect = _upsert_dialect(session)
    rows = select(
        literal(execution_id, String()),
        literal(node_id, String()),
        literal(now, DateTime(timezone=True)),
    ).where(taken < cap)
    statement = (
        dialect.insert(JobSlot)
        .from_select(["execution_id", "node", "acquired_at"], rows)
        .returning(col(JobSlot.execution_id))
    )
    # RETURNING, not rowcount: an INSERT … SELECT reports no row count on every driver.
    granted = session.execute(statement).first() is not None
    session.commit()
    return granted


def release_job_slot(session: Session, *, execution_id: str) -> None:
    session.execute(delete(JobSlot).where(col(JobSlot.execution_id) == execution_id))
    session.commit()


def count_job_slots(session: Session) -> int:
    return int(session.exec(select(func.count()).select_from(JobSlot)).one())


# --- ownership -------------------------------------------------------------------------------


def execution_owner(session: Session, *, execution_id: str) -> tuple[str | None, str] | None:
    """(node, state) of an execution, or None when there is no such execution."""
    row = session.exec(
        select(Execution.node, Execution.state).where(col(Execution.id) == execution_id)
    ).first()
    return None if row is None else (row[0], row[1])


def session_node(session: Session, *, session_id: str) -> tuple[str | None, bool] | None:
    """(node, lost) of a session, or None when there is no such session."""
    row = session.exec(
        select(ShellSession.node, ShellSession.lost_at).where(col(ShellSession.id) == session_id)
    ).first()
    return None if row is None else (row[0], row[1] is not None)


def claim_awaiting(
    session: Session, *, execution_id: str, from_node: str | None, to_node: str
) -> bool:
    """Take over an execution awaiting approval from a dead replica; False if it is no longer
    awaiting or someone else took it first."""
    owner = col(Execution.node).is_(None) if from_node is None else col(Execution.node) == from_node
    result = session.execute(
        update(Execution)
        .where(
            col(Execution.id) == execution_id,
            col(Execution.state) == ExecutionState.awaiting_approval.value,
            owner,
        )
        .values(node=to_node)
    )
    session.commit()
    return bool(getattr(result, "rowcount", 0))


# --- approvals across replicas ---------------------------------------------------------------


def decided_but_waiting(session: Session, *, me: str, cutoff: datetime) -> list[Approval]:
    """Decided approvals whose subject still awaits them: an execution on this node or a dead
    one, or a file operation (any replica may settle it: the first claim wins). The decisions
    a missed notification would leave unsettled."""
    query = (
        select(Approval)
        .join(Execution, col(Execution.id) == col(Approval.execution_id))
        .where(
            col(Approval.state) != ApprovalState.pending.value,
            col(Execution.state) == ExecutionState.awaiting_approval.value,
            or_(
                col(Execution.node) == me,
                col(Execution.node).is_(None),
                col(Execution.node).in_(_dead_nodes(cutoff, me)),
            ),
        )
    )
    files = (
        select(Approval)
        .join(FileOperation, col(FileOperation.id) == col(Approval.file_operation_id))
        .where(
            col(Approval.state) != ApprovalState.pending.value,
            col(FileOperation.state) == "awaiting_approval",
        )
    )
    return [*session.exec(query).all(), *session.exec(files).all()]


def approvals_changed_since(session: Session, *, since: datetime) -> list[Approval]:
    query = select(Approval).where(
        or_(col(Approval.created_at) > since, col(Approval.decided_at) > since)
    )
    return list(session.exec(query).all())


def notify(session: Session, *, payload: str) -> None:
    """PostgreSQL only: tell every listening replica (delivered at commit)."""
    session.execute(
        text("SELECT pg_notify(:channel, :payload)"),
        {"channel": NOTIFY_CHANNEL, "payload": payload},
    )
    session.commit()
