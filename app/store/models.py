"""Registry tables (SQLModel) and the enums that name their states.

The schema is owned by Alembic (`migrations/`); these classes must stay in step with it, which
`tests/test_migrations.py` checks by comparing the two. A database with no tables yet is
created from them (app/store/migrate.py), so they also carry what the migrations left that the
ORM does not need: the server defaults added columns were given, a constraint's name.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Literal

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    ForeignKeyConstraint,
    Index,
    Text,
    false,
)
from sqlmodel import Field, SQLModel


def utcnow() -> datetime:
    return datetime.now(UTC)


class ExecutionState(StrEnum):
    awaiting_approval = "awaiting_approval"
    running = "running"
    completed = "completed"
    failed = "failed"
    timed_out = "timed_out"
    cancelled = "cancelled"
    rejected = "rejected"
    lost = "lost"

    @property
    def is_terminal(self) -> bool:
        return self not in (ExecutionState.awaiting_approval, ExecutionState.running)


class ExecutionMode(StrEnum):
    foreground = "foreground"
    job = "job"


# What an approval asks (docs/policy.md#approvals): to run a command, a file operation through
# the files API, or a sandbox beyond the policy's profile for one execution.
ApprovalKind = Literal["command", "file", "sandbox"]
# What an approval's decision settles (its handler: app/approvals/service.py): an execution
# (`execution_id`), a file operation (`file_operation_id`; no execution), or a new session's
# sandbox request, still kept on an execution record that never runs a process (`execution_id`).
ApprovalSubject = Literal["execution", "file_operation", "session"]


class ApprovalState(StrEnum):
    pending = "pending"
    approved = "approved"
    denied = "denied"
    expired = "expired"


def _ts(nullable: bool = True) -> Column[datetime]:
    return Column(DateTime(timezone=True), nullable=nullable)


class Execution(SQLModel, table=True):
    __tablename__ = "executions"
    __table_args__ = (
        Index("ix_executions_owner_created", "owner", "created_at"),
        # An admin's list (newest first, no owner) walks it instead of sorting every row.
        Index("ix_executions_created_id", "created_at", "id"),
        Index("ix_executions_state", "state"),
        Index("ix_executions_node_state", "node", "state"),
        Index("ix_executions_notify_state", "notify_state"),
    )

    id: str = Field(primary_key=True, max_length=64)
    owner: str = Field(max_length=64)
    command: str = Field(sa_column=Column(Text, nullable=False))
    original_command: str = Field(sa_column=Column(Text, nullable=False))
    cwd: str = Field(sa_column=Column(Text, nullable=False))
    state: str = Field(max_length=32)
    mode: str = Field(default=ExecutionMode.foreground, max_length=16)
    pty: bool = False
    session_id: str | None = Field(default=None, max_length=64)
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    pid: int | None = None
    pgid: int | None = None
    proc_start_ticks: int | None = Field(default=None, sa_column=Column(BigInteger))
    boot_id: str | None = Field(default=None, max_length=64)
    timeout_seconds: float | None = None
    requested_timeout_seconds: float | None = None
    timeout_disabled: bool = False
    notices: str = Field(default="[]", sa_column=Column(Text, nullable=False))
    # The resource limits the run had (JSON object) and the backend that enforced them.
    limits: str | None = Field(default=None, sa_column=Column(Text))
    confinement: str | None = Field(default=None, max_length=16)
    # The sandbox profile it ran with (JSON: network, write, hidden, escalated); NULL when
    # the sandbox was off (docs/sandbox.md).
    sandbox: str | None = Field(default=None, sa_column=Column(Text))
    total_bytes: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    total_lines: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    output_bytes: int = 0
    output_lines: int = 0
    elided_bytes: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    truncated: bool = False
    output: str | None = Field(default=None, sa_column=Column(Text))
    # The model-facing text, written once when the execution ends. It begins with the output
    # (up to 70 KiB): then only the rest is kept, in `text_after_output`, and `text` is NULL;
    # `text` holds a text that does not (app/store/inline_text.py).
    text: str | None = Field(default=None, sa_column=Column(Text))
    text_after_output: str | None = Field(default=None, sa_column=Column(Text))
    artifact_path: str = Field(sa_column=Column(Text, nullable=False))
    wall_time_ms: float | None = None
    approval_id: str | None = Field(default=None, max_length=64)
    # The validated request, kept only while an approval is pending so that an approved
    # execution can start even after a restart; cleared once it starts.
    pending_request: str | None = Field(default=None, sa_column=Column(Text))
    # The replica (nodes.id) whose process this is, or that holds it for approval.
    node: str | None = Field(default=None, max_length=64)
    created_at: datetime = Field(default_factory=utcnow, sa_column=_ts(False))
    started_at: datetime | None = Field(default=None, sa_column=_ts())
    finished_at: datetime | None = Field(default=None, sa_column=_ts())
    # Completion delivery (app/notifications): where the terminal record is POSTed, how far
    # that got (NotifyState; null: no delivery), every attempt (JSON list) and when the next
    # one is due, so that a restart resumes it.
    notify_url: str | None = Field(default=None, sa_column=Column(Text))
    notify_state: str | None = Field(default=None, max_length=16)
    notify_attempts: str | None = Field(default=None, sa_column=Column(Text))
    notify_next_at: datetime | None = Field(default=None, sa_column=_ts())
    # The policy's reason for its verdict, and the remembered rule (rr_…) that allowed it
    # without a prompt (docs/policy.md#remembered-decisions).
    policy_reason: str | None = Field(default=None, sa_column=Column(Text))
    remembered_rule: str | None = Field(default=None, max_length=64)


class NotifyState(StrEnum):
    waiting = "waiting"  # the execution has not ended yet, or its delivery is still retried
    delivered = "delivered"
    failed = "failed"  # the retry window closed without a 2xx


class Approval(SQLModel, table=True):
    __tablename__ = "approvals"
    __table_args__ = (
        Index("ix_approvals_state", "state"),
        Index("ix_approvals_requested_by_state", "requested_by", "state"),
        Index("ix_approvals_file_operation", "file_operation_id"),
        # Named as migration 0016 named it, which its downgrade drops by name.
        ForeignKeyConstraint(
            ["file_operation_id"], ["file_operations.id"], name="fk_approvals_file_operation_id"
        ),
    )

    id: str = Field(primary_key=True, max_length=64)
    # ApprovalSubject, and the record it names: one of the two ids for an execution or a file
    # operation; neither for a new session's sandbox (`session_grant`), whose session does
    # not exist until the approval is used.
    subject: str = Field(
        default="execution", max_length=16, sa_column_kwargs={"server_default": "execution"}
    )
    execution_id: str | None = Field(default=None, foreign_key="executions.id", max_length=64)
    file_operation_id: str | None = Field(default=None, max_length=64)
    command: str = Field(sa_column=Column(Text, nullable=False))
    cwd: str = Field(sa_column=Column(Text, nullable=False))
    # What else decides what runs, shown to the approver beside the command: the environment
    # values (JSON object: the session's overlaid by the call's), the session, the terminal.
    env: str = Field(default="{}", sa_column=Column(Text, nullable=False, server_default="{}"))
    session_id: str | None = Field(default=None, max_length=64)
    pty: bool = Field(default=False, sa_column_kwargs={"server_default": false()})
    reason: str = Field(sa_column=Column(Text, nullable=False))
    # ApprovalKind; and for a `sandbox` one, what it asks beyond the profile (JSON object).
    kind: str = Field(
        default="command", max_length=16, sa_column_kwargs={"server_default": "command"}
    )
    sandbox_request: str | None = Field(default=None, sa_column=Column(Text))
    state: str = Field(default=ApprovalState.pending, max_length=16)
    requested_by: str = Field(max_length=64)
    decided_by: str | None = Field(default=None, max_length=64)
    decision_reason: str | None = Field(default=None, sa_column=Column(Text))
    created_at: datetime = Field(default_factory=utcnow, sa_column=_ts(False))
    decided_at: datetime | None = Field(default=None, sa_column=_ts())
    expires_at: datetime = Field(sa_column=_ts(False))
    # The pattern offered to remember (from the segment that prompted; null: this approval
    # cannot be remembered, e.g. a files-API one) and the remembered rule its approval made.
    suggested_pattern: str | None = Field(default=None, sa_column=Column(Text))
    remembered_rule: str | None = Field(default=None, max_length=64)
    # Subject `session`: the profile an approval grants and what was asked (JSON object
    # {"granted", "asked"}), until the session it makes takes it (then null: used once).
    session_grant: str | None = Field(default=None, sa_column=Column(Text))


class PolicyVersion(SQLModel, table=True):
    __tablename__ = "policy_versions"

    id: int | None = Field(default=None, primary_key=True)
    document: str = Field(sa_column=Column(Text, nullable=False))
    author: str = Field(max_length=64)
    created_at: datetime = Field(default_factory=utcnow, sa_column=_ts(False))


class ShellSession(SQLModel, table=True):
    """A session's configuration (docs/streaming.md#sessions). Its shell state is a snapshot
    file in the data dir; a deleted session keeps its row (with `deleted_at`) so executions
    still name it."""

    __tablename__ = "sessions"
    __table_args__ = (Index("ix_sessions_owner_created", "owner", "created_at"),)

    id: str = Field(primary_key=True, max_length=64)
    owner: str = Field(max_length=64)
    cwd: str = Field(sa_column=Column(Text, nullable=False))
    env: str = Field(default="{}", sa_column=Column(Text, nullable=False))  # JSON object
    timeout_ms: int = Field(sa_column=Column(BigInteger, nullable=False))
    pty: bool = False
    # Each call starts where the owning call before it ended (`cwd` follows it).
    keep_cwd: bool = Field(
        default=False, sa_column=Column(Boolean, nullable=False, server_default=false())
    )
    limits: str = Field(
        default="{}", sa_column=Column(Text, nullable=False, server_default="{}")
    )  # JSON object
    # The sandbox profile its calls run with, fixed at its creation (JSON; NULL: made while
    # the sandbox was off).
    sandbox: str | None = Field(default=None, sa_column=Column(Text))
    node: str | None = Field(default=None, max_length=64)  # the replica its shell lives on
    created_at: datetime = Field(default_factory=utcnow, sa_column=_ts(False))
    updated_at: datetime = Field(default_factory=utcnow, sa_column=_ts(False))
    deleted_at: datetime | None = Field(default=None, sa_column=_ts())
    # Set once by the cluster when `node` stopped heartbeating: the session is gone with it,
    # for good (a returning replica does not take it back).
    lost_at: datetime | None = Field(default=None, sa_column=_ts())


class FileOperation(SQLModel, table=True):
    """One read, write or stat of a file through the files API (docs/api.md#files): who, what,
    the policy's verdict and how it ended. A `prompt`ed one also names its approval, whose
    subject it is."""

    __tablename__ = "file_operations"
    __table_args__ = (
        Index("ix_file_operations_owner_created", "owner", "created_at"),
        Index("ix_file_operations_approval", "approval_id"),
    )

    id: str = Field(primary_key=True, max_length=64)
    owner: str = Field(max_length=64)
    op: str = Field(max_length=16)  # read, write, stat
    path: str = Field(sa_column=Column(Text, nullable=False))  # absolute, as requested
    resolved_path: str = Field(sa_column=Column(Text, nullable=False))  # symlinks followed
    size: int | None = Field(default=None, sa_column=Column(BigInteger))
    mode: int | None = None
    sha256: str | None = Field(default=None, max_length=64)
    verdict: str = Field(max_length=16)
    reason: str = Field(sa_column=Column(Text, nullable=False))
    state: str = Field(max_length=32)
    message: str | None = Field(default=None, sa_column=Column(Text))
    approval_id: str | None = Field(default=None, max_length=64)
    created_at: datetime = Field(default_factory=utcnow, sa_column=_ts(False))
    finished_at: datetime | None = Field(default=None, sa_column=_ts())


class Node(SQLModel, table=True):
    """A replica sharing this database (docs/operations.md#several-replicas): where the others
    reach it, when it last said it was alive, and since when it is stopping (its graceful stop
    begun; cleared by its next start)."""

    __tablename__ = "nodes"

    id: str = Field(primary_key=True, max_length=64)
    url: str | None = Field(default=None, sa_column=Column(Text))
    version: str = Field(max_length=32)
    started_at: datetime = Field(sa_column=_ts(False))
    last_heartbeat: datetime = Field(sa_column=_ts(False))
    stopping_since: datetime | None = Field(default=None, sa_column=_ts())


class JobSlot(SQLModel, table=True):
    """One background job's place under the job cap, shared by every replica: a job holds a
    row while it runs, and a new one gets a row only while fewer than the cap exist."""

    __tablename__ = "job_slots"
    __table_args__ = (Index("ix_job_slots_node", "node"),)

    execution_id: str = Field(primary_key=True, max_length=64)
    node: str = Field(max_length=64)
    acquired_at: datetime = Field(sa_column=_ts(False))


class WsTicket(SQLModel, table=True):
    """A browser WebSocket ticket not yet redeemed (docs/streaming.md#tickets-for-browsers).
    Kept in the database, not in one replica's memory, so that any replica behind a gateway
    redeems it, and only once: redeeming deletes the row. Holds the ticket's sha256, never the
    ticket itself."""

    __tablename__ = "ws_tickets"
    __table_args__ = (Index("ix_ws_tickets_expires_at", "expires_at"),)

    digest: str = Field(primary_key=True, max_length=64)
    owner: str = Field(max_length=64)
    role: str = Field(max_length=16)
    expires_at: datetime = Field(sa_column=_ts(False))
