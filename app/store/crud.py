"""The only module that composes SQL. Plain synchronous functions over a Session or, on the
hot path of every execution (its record's insert and final write), over a Core `Connection`.

Callers on the event loop go through `Database.call` (Session) or `Database.run` (Connection),
which run them in a worker thread. Every statement is portable SQL (SQLite and PostgreSQL
alike). The hot-path statements are built once at import: SQLAlchemy then reuses their cache
key and compiled form, where an ORM session would rebuild both per call (the ORM's insert and
bulk-update machinery cost 4-6 times the Core statement for one row). Every write of an
execution's text block goes through `without_repeated_output`: the row keeps its inline output
once (app/store/inline_text.py).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Table, and_, bindparam, delete, func, insert, or_, text, update
from sqlmodel import Session, col, select

from app.store.inline_text import without_repeated_output
from app.store.models import (
    Approval,
    ApprovalState,
    Execution,
    ExecutionState,
    FileOperation,
    NotifyState,
    PolicyVersion,
    ShellSession,
    WsTicket,
    utcnow,
)

ACTIVE_STATES = (ExecutionState.awaiting_approval.value, ExecutionState.running.value)

EXECUTIONS: Table = Execution.__table__  # type: ignore[attr-defined]
_SELECT_ONE = text("SELECT 1")
_INSERT_EXECUTION = insert(EXECUTIONS)
# The SET clause comes from the parameters of each call; the id's parameter has a name no
# column has, so it can never be mistaken for a value to set.
_UPDATE_EXECUTION = update(EXECUTIONS).where(EXECUTIONS.c.id == bindparam("where_id"))
_EXECUTION_EXISTS = select(EXECUTIONS.c.id).where(EXECUTIONS.c.id == bindparam("where_id")).limit(1)
_FINISH_EXECUTION = update(EXECUTIONS).where(
    EXECUTIONS.c.id == bindparam("where_id"), EXECUTIONS.c.state.in_(ACTIVE_STATES)
)


def ping(session: Session) -> None:
    """A round trip to the database (readiness)."""
    session.execute(_SELECT_ONE)


def schema_revisions(connection: Connection) -> set[str]:
    """The revisions Alembic recorded (raises when it never ran on this database)."""
    rows = connection.execute(text("SELECT version_num FROM alembic_version"))
    return {str(row[0]) for row in rows}


def record_schema_revisions(connection: Connection, revisions: set[str]) -> None:
    """Into a new, empty `alembic_version`, as Alembic's own upgrade would have left it."""
    connection.execute(
        text("INSERT INTO alembic_version (version_num) VALUES (:revision)"),
        [{"revision": revision} for revision in sorted(revisions)],
    )


def lock_schema_postgres(connection: Connection, key: int) -> None:
    """PostgreSQL only (the one statement here that is not portable): wait for and hold the
    transaction-level advisory lock `key` until the transaction ends."""
    connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})


def execution_row(execution: Execution) -> dict[str, Any]:
    """The record as column values, defaults included (what an insert writes)."""
    return {column.name: getattr(execution, column.name) for column in EXECUTIONS.columns}


def insert_execution(connection: Connection, *, execution: Execution) -> Execution:
    connection.execute(_INSERT_EXECUTION, without_repeated_output(execution_row(execution)))
    return execution


def get_execution(session: Session, *, execution_id: str) -> Execution | None:
    return session.get(Execution, execution_id)


def insert_execution_if_absent(connection: Connection, *, row: dict[str, Any]) -> bool:
    """Insert the row unless its id exists; True if inserted."""
    exists = connection.execute(_EXECUTION_EXISTS, {"where_id": row["id"]}).first()
    if exists is not None:
        return False
    connection.execute(_INSERT_EXECUTION, without_repeated_output(row))
    return True


def insert_execution_row(connection: Connection, *, row: dict[str, Any]) -> None:
    connection.execute(_INSERT_EXECUTION, without_repeated_output(row))


def insert_or_finish_execution(connection: Connection, *, row: dict[str, Any]) -> bool:
    """The terminal row of an execution whose `running` row may or may not exist: inserted
    whole, or written over the running row (as `finish_execution`)."""
    if insert_execution_if_absent(connection, row=row):
        return True
    values = {key: value for key, value in row.items() if key != "id"}
    return finish_execution(connection, execution_id=row["id"], values=values)


def update_execution(connection: Connection, *, execution_id: str, values: dict[str, Any]) -> None:
    connection.execute(
        _UPDATE_EXECUTION, {**without_repeated_output(values), "where_id": execution_id}
    )


def finish_execution(connection: Connection, *, execution_id: str, values: dict[str, Any]) -> bool:
    """Write a terminal state unless one is already recorded: terminal states never change."""
    result = connection.execute(
        _FINISH_EXECUTION, {**without_repeated_output(values), "where_id": execution_id}
    )
    return bool(result.rowcount)


def rewrite_lost_output(
    connection: Connection, *, execution_id: str, values: dict[str, Any]
) -> bool:
    """A lost execution's output, re-read from its log after start-up (its state stays)."""
    result = connection.execute(
        update(EXECUTIONS)
        .where(EXECUTIONS.c.id == execution_id, EXECUTIONS.c.state == ExecutionState.lost.value)
        .values(**without_repeated_output(values))
    )
    return bool(result.rowcount)


def take_pending_request(
    session: Session, *, execution_id: str, pending_request: str | None
) -> bool:
    """Clear an execution's stored request if it is still `pending_request`: whoever takes it
    first (the waiting call or a retry) uses what it grants, once."""
    result = session.execute(
        update(Execution)
        .where(
            col(Execution.id) == execution_id,
            col(Execution.pending_request) == pending_request,
        )
        .values(pending_request=None)
    )
    session.commit()
    return bool(getattr(result, "rowcount", 0))


def encode_cursor(execution: Execution) -> str:
    raw = json.dumps([execution.created_at.isoformat(), execution.id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """Raises ValueError on anything that is not a cursor this module made."""
    padded = cursor + "=" * (-len(cursor) % 4)
    created, execution_id = json.loads(base64.urlsafe_b64decode(padded.encode()))
    if not isinstance(created, str) or not isinstance(execution_id, str):
        raise ValueError("bad cursor")
    return datetime.fromisoformat(created), execution_id


def list_executions(
    session: Session,
    *,
    owner: str | None,
    states: Sequence[str] | None,
    limit: int,
    cursor: tuple[datetime, str] | None,
) -> list[Execution]:
    query = select(Execution)
    if owner is not None:
        query = query.where(col(Execution.owner) == owner)
    if states:
        query = query.where(col(Execution.state).in_(list(states)))
    if cursor is not None:
        created, execution_id = cursor
        query = query.where(
            or_(
                col(Execution.created_at) < created,
                and_(col(Execution.created_at) == created, col(Execution.id) < execution_id),
            )
        )
    query = query.order_by(col(Execution.created_at).desc(), col(Execution.id).desc()).limit(limit)
    return list(session.exec(query).all())


def executions_in_state(session: Session, *, state: ExecutionState) -> list[Execution]:
    return list(session.exec(select(Execution).where(col(Execution.state) == state.value)).all())


def lost_by_others_since(
    session: Session, *, node_id: str, since: datetime, notices: tuple[str, ...]
) -> list[Execution]:
    """This node's executions another replica recorded `lost` (with a notice containing one of
    `notices`) after `since`, this node's last heartbeat before it went silent."""
    query = select(Execution).where(
        col(Execution.state) == ExecutionState.lost.value,
        col(Execution.node) == node_id,
        col(Execution.finished_at) >= since,
        or_(
            *(
                col(Execution.notices).contains(json.dumps(notice)[1:-1], autoescape=True)
                for notice in notices
            )
        ),
    )
    return list(session.exec(query).all())


def count_executions(session: Session) -> int:
    return int(session.exec(select(func.count()).select_from(Execution)).one())


def delete_finished_before(session: Session, *, cutoff: datetime) -> list[Execution]:
    """Delete terminal executions (and their approvals) finished before cutoff; return them.
    The record of file operations finished before it goes too, with their approvals."""
    operations = select(FileOperation.id).where(col(FileOperation.finished_at) < cutoff)
    session.execute(delete(Approval).where(col(Approval.file_operation_id).in_(operations)))
    session.execute(delete(FileOperation).where(col(FileOperation.finished_at) < cutoff))
    doomed = list(
        session.exec(
            select(Execution).where(
                col(Execution.finished_at) < cutoff, col(Execution.state).not_in(ACTIVE_STATES)
            )
        ).all()
    )
    if not doomed:
        session.commit()
        return []
    ids = [execution.id for execution in doomed]
    session.execute(delete(Approval).where(col(Approval.execution_id).in_(ids)))
    session.execute(delete(Execution).where(col(Execution.id).in_(ids)))
    session.commit()
    return doomed


# --- approvals -------------------------------------------------------------------------------


def insert_awaiting(
    session: Session,
    *,
    record: Execution | FileOperation | None,
    approval: Approval,
    max_pending: int,
) -> Approval | None:
    """An approval and the record of its subject (an execution, a file operation; none for a
    new session's sandbox, which the approval itself holds) in one transaction (neither exists
    without the other), unless the requester already has `max_pending` pending approvals: None
    then, and nothing is written.

    The count runs inside the writing transaction, after its first write: SQLite holds its
    single write lock from that write to the commit, so concurrent requests count one after
    another. PostgreSQL takes a transaction-scoped advisory lock on the requester first, which
    serialises the requests of one owner across every replica.
    """
    if session.get_bind().dialect.name == "postgresql":
        session.execute(
            text("SELECT pg_advisory_xact_lock(hashtext(:key))"),
            {"key": f"shellgate.pending-approvals:{approval.requested_by}"},
        )
    # The approval's first, when there is no record: its flush takes the write lock instead.
    session.add(approval if record is None else record)
    session.flush()  # takes the write lock; the approval's foreign key needs the record
    pending = session.exec(
        select(func.count())
        .select_from(Approval)
        .where(
            col(Approval.requested_by) == approval.requested_by,
            col(Approval.state) == ApprovalState.pending.value,
            col(Approval.id) != approval.id,
        )
    ).one()
    if int(pending) >= max_pending:
        session.rollback()
        return None
    session.add(approval)
    session.commit()
    session.refresh(approval)
    return approval


def take_session_grant(session: Session, *, approval_id: str, grant: str) -> bool:
    """Clear a session approval's grant if it is still `grant`: whoever takes it first (the
    waiting call or a retry) makes its one session."""
    result = session.execute(
        update(Approval)
        .where(col(Approval.id) == approval_id, col(Approval.session_grant) == grant)
        .values(session_grant=None)
    )
    session.commit()
    return bool(getattr(result, "rowcount", 0))


def earliest_pending_expiry(session: Session, *, requested_by: str) -> datetime | None:
    query = select(func.min(Approval.expires_at)).where(
        col(Approval.requested_by) == requested_by,
        col(Approval.state) == ApprovalState.pending.value,
    )
    value = session.exec(query).one()
    return value if isinstance(value, datetime) else None


def get_approval(session: Session, *, approval_id: str) -> Approval | None:
    return session.get(Approval, approval_id)


def decide_approval(
    session: Session,
    *,
    approval_id: str,
    state: ApprovalState,
    decided_by: str,
    decision_reason: str | None,
    decided_at: datetime,
    remembered_rule: str | None = None,
) -> bool:
    """Record a decision only while the approval is pending; False if someone decided first."""
    result = session.execute(
        update(Approval)
        .where(col(Approval.id) == approval_id, col(Approval.state) == ApprovalState.pending.value)
        .values(
            state=state.value,
            decided_by=decided_by,
            decision_reason=decision_reason,
            decided_at=decided_at,
            remembered_rule=remembered_rule,
        )
    )
    session.commit()
    return bool(getattr(result, "rowcount", 0))


def list_approvals(
    session: Session,
    *,
    state: str | None,
    requested_by: str | None,
    limit: int,
    since: datetime | None = None,
) -> list[Approval]:
    query = select(Approval)
    if since is not None:
        query = query.where(col(Approval.created_at) >= since)
    if state is not None:
        query = query.where(col(Approval.state) == state)
    if requested_by is not None:
        query = query.where(col(Approval.requested_by) == requested_by)
    query = query.order_by(col(Approval.created_at).desc(), col(Approval.id).desc()).limit(limit)
    return list(session.exec(query).all())


def decided_but_unsettled(session: Session) -> list[Approval]:
    """Decided approvals whose subject still awaits them: an execution or a file operation
    still `awaiting_approval`. (A new session's request has no record to settle: its grant,
    on the approval, is taken by the call that made it or by a retry.)"""
    executions = (
        select(Approval)
        .join(Execution, col(Execution.id) == col(Approval.execution_id))
        .where(
            col(Approval.state) != ApprovalState.pending.value,
            col(Execution.state) == ExecutionState.awaiting_approval.value,
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
    return [*session.exec(executions).all(), *session.exec(files).all()]


def pending_approvals(session: Session) -> list[Approval]:
    query = select(Approval).where(col(Approval.state) == ApprovalState.pending.value)
    return list(session.exec(query).all())


# --- policy versions -------------------------------------------------------------------------


def insert_policy_version(session: Session, *, document: str, author: str) -> PolicyVersion:
    version = PolicyVersion(document=document, author=author)
    session.add(version)
    session.commit()
    session.refresh(version)
    return version


def latest_policy_version(session: Session) -> PolicyVersion | None:
    query = select(PolicyVersion).order_by(col(PolicyVersion.id).desc()).limit(1)
    return session.exec(query).first()


def list_policy_versions(session: Session, *, limit: int) -> list[PolicyVersion]:
    query = select(PolicyVersion).order_by(col(PolicyVersion.id).desc()).limit(limit)
    return list(session.exec(query).all())


# --- sessions --------------------------------------------------------------------------------


def insert_session_within(
    session: Session, *, record: ShellSession, max_open: int
) -> ShellSession | None:
    """The session, unless its owner already has `max_open` open ones: None then, nothing
    written. Counted inside the writing transaction, serialised per owner as the pending
    approvals are (`insert_awaiting`): concurrent creations never pass the cap."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(
            text("SELECT pg_advisory_xact_lock(hashtext(:key))"),
            {"key": f"shellgate.sessions:{record.owner}"},
        )
    session.add(record)
    session.flush()  # takes SQLite's write lock before the count
    open_sessions = session.exec(
        select(func.count())
        .select_from(ShellSession)
        .where(
            col(ShellSession.owner) == record.owner,
            col(ShellSession.deleted_at).is_(None),
            col(ShellSession.lost_at).is_(None),
            col(ShellSession.id) != record.id,
        )
    ).one()
    if int(open_sessions) >= max_open:
        session.rollback()
        return None
    session.commit()
    session.refresh(record)
    return record


def get_live_session(session: Session, *, session_id: str) -> ShellSession | None:
    record = session.get(ShellSession, session_id)
    return record if record is not None and record.deleted_at is None else None


def list_live_sessions(session: Session, *, owner: str | None) -> list[ShellSession]:
    query = select(ShellSession).where(
        col(ShellSession.deleted_at).is_(None), col(ShellSession.lost_at).is_(None)
    )
    if owner is not None:
        query = query.where(col(ShellSession.owner) == owner)
    query = query.order_by(col(ShellSession.created_at).desc(), col(ShellSession.id).desc())
    return list(session.exec(query).all())


def update_session(
    session: Session, *, session_id: str, values: dict[str, Any]
) -> ShellSession | None:
    record = session.get(ShellSession, session_id)
    if record is None:
        return None
    for key, value in values.items():
        setattr(record, key, value)
    session.add(record)
    session.commit()
    session.refresh(record)
    return record


# --- file operations ---------------------------------------------------------------------------


def insert_file_operation(session: Session, *, record: FileOperation) -> FileOperation:
    session.add(record)
    session.commit()
    session.refresh(record)
    return record


def update_file_operation(session: Session, *, operation_id: str, values: dict[str, Any]) -> None:
    session.execute(
        update(FileOperation).where(col(FileOperation.id) == operation_id).values(**values)
    )
    session.commit()


def claim_file_operation(
    session: Session,
    *,
    operation_id: str,
    from_state: str,
    to_state: str,
    message: str | None = None,
    finished: bool = False,
) -> bool:
    """Move a file operation from one state to the next unless something else already did:
    an approved transfer runs once, whoever (the waiting call or a retry) claims it first.
    The message and end time are written by the same statement, so whoever reads the new
    state (the other claimant included) reads them too."""
    values: dict[str, object] = {"state": to_state, "message": message}
    if finished:
        values["finished_at"] = utcnow()
    result = session.execute(
        update(FileOperation)
        .where(col(FileOperation.id) == operation_id, col(FileOperation.state) == from_state)
        .values(**values)
    )
    session.commit()
    return bool(getattr(result, "rowcount", 0))


def file_operation_by_id(session: Session, *, operation_id: str) -> FileOperation | None:
    return session.get(FileOperation, operation_id)


def file_operation_by_approval(session: Session, *, approval_id: str) -> FileOperation | None:
    query = select(FileOperation).where(col(FileOperation.approval_id) == approval_id)
    return session.exec(query).first()


def list_file_operations(session: Session, *, owner: str | None, limit: int) -> list[FileOperation]:
    query = select(FileOperation)
    if owner is not None:
        query = query.where(col(FileOperation.owner) == owner)
    query = query.order_by(col(FileOperation.created_at).desc(), col(FileOperation.id).desc())
    return list(session.exec(query.limit(limit)).all())


# --- completion delivery (app/notifications) -------------------------------------------------


def executions_awaiting_delivery(session: Session) -> list[Execution]:
    """Executions whose terminal record is still to be delivered (or that have not ended)."""
    query = select(Execution).where(col(Execution.notify_state) == NotifyState.waiting.value)
    return list(session.exec(query).all())


# --- browser WebSocket tickets (app/api/ws_tickets.py) --------------------------------------------

WS_TICKETS: Table = WsTicket.__table__  # type: ignore[attr-defined]


def store_ws_ticket(
    connection: Connection,
    *,
    digest: str,
    owner: str,
    role: str,
    expires_at: datetime,
    now: datetime,
) -> None:
    # Expired tickets go whenever one is issued: the table holds live tickets only.
    connection.execute(delete(WS_TICKETS).where(WS_TICKETS.c.expires_at < now))
    connection.execute(
        insert(WS_TICKETS).values(digest=digest, owner=owner, role=role, expires_at=expires_at)
    )


def take_ws_ticket(connection: Connection, *, digest: str) -> tuple[str, str, datetime] | None:
    """(owner, role, expires_at) of the ticket, deleting it: whoever deletes the row redeems
    it, so two replicas racing for one ticket cannot both win."""
    row = connection.execute(
        delete(WS_TICKETS)
        .where(WS_TICKETS.c.digest == digest)
        .returning(WS_TICKETS.c.owner, WS_TICKETS.c.role, WS_TICKETS.c.expires_at)
    ).first()
    return None if row is None else (row.owner, row.role, row.expires_at)
