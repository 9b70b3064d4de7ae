"""Reading executions: the record → wire mapping, who may read what, the long-poll, the list and
the raw output log. Nothing here changes a record."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

from app.core.auth import Principal
from app.core.blocking import run_blocking
from app.core.errors import (
    AppError,
    DescriptorsExhaustedError,
    InvalidRequestError,
    LogOwnerUnreachableError,
    NotFoundError,
    OutputGoneError,
    is_descriptors_exhausted,
)
from app.executions.context import Context
from app.executions.registry import LiveExecution
from app.executions.result_text import final_text
from app.output.artifact_log import ArtifactLog
from app.output.search import LogSearch, search_log
from app.schemas import ApprovalSummary, ExecutionPublic
from app.store import crud
from app.store.inline_text import recorded_text
from app.store.models import Approval, ApprovalState, Execution, ExecutionMode, ExecutionState
from app.store.timestamps import aware_utc

ERROR_STATES = frozenset(
    {
        ExecutionState.timed_out,
        ExecutionState.cancelled,
        ExecutionState.failed,
        ExecutionState.lost,
        ExecutionState.rejected,
    }
)


# How often a wait here for another replica's execution reads its record again: a long-poll,
# or a request whose owner stopped answering as it stops (Forwarder.until_recorded).
ELSEWHERE_POLL_SECONDS = 0.25


@dataclass(frozen=True)
class OutputPage:
    data: bytes
    total_bytes: int
    complete: bool
    next_offset: int


def is_terminal(record: Execution) -> bool:
    return ExecutionState(record.state).is_terminal


def to_public(
    record: Execution, live: LiveExecution | None = None, approval: Approval | None = None
) -> ExecutionPublic:
    """The wire form; a running execution (with `live`) shows its output so far."""
    state = ExecutionState(record.state)
    notices: list[str] = json.loads(record.notices)
    if live is not None and not state.is_terminal:
        summary = live.summary()
        output, truncated = summary.output, summary.truncated
        counts = (
            summary.total_bytes,
            summary.total_lines,
            summary.output_bytes,
            summary.output_lines,
            summary.elided_bytes,
        )
        text = output if output else "(no output)"
    else:
        output = record.output or ""
        truncated = record.truncated
        counts = (
            record.total_bytes,
            record.total_lines,
            record.output_bytes,
            record.output_lines,
            record.elided_bytes,
        )
        text = recorded_text(record) or final_text(
            body=output,
            wall_time_ms=record.wall_time_ms,
            notices=notices,
            state=state,
            exit_code=record.exit_code,
            footer=None,
        )
    approval_summary = None
    if approval is not None:
        approval_summary = ApprovalSummary(
            id=approval.id,
            state=ApprovalState(approval.state),
            reason=approval.reason,
            expires_at=aware_utc(approval.expires_at),
        )
    return ExecutionPublic(
        id=record.id,
        state=state,
        mode=ExecutionMode(record.mode),
        owner=record.owner,
        command=record.command,
        cwd=record.cwd,
        pty=record.pty,
        session=record.session_id,
        node=record.node,
        exit_code=record.exit_code,
        signal=record.signal,
        timed_out=record.timed_out,
        output=output,
        truncated=truncated,
        total_bytes=counts[0],
        total_lines=counts[1],
        output_bytes=counts[2],
        output_lines=counts[3],
        elided_bytes=counts[4],
        artifact=f"artifact://{record.id}",
        wall_time_ms=record.wall_time_ms,
        timeout_seconds=record.timeout_seconds,
        requested_timeout_seconds=record.requested_timeout_seconds,
        timeout_disabled=True if record.timeout_disabled else None,
        notices=notices,
        limits=json.loads(record.limits) if record.limits else None,
        confinement=record.confinement,
        sandbox=json.loads(record.sandbox) if record.sandbox else None,
        is_error=state in ERROR_STATES,
        text=text,
        approval=approval_summary,
        reason=record.policy_reason,
        remembered_rule=record.remembered_rule,
        notify_url=record.notify_url,
        notify_state=record.notify_state,
        notifications=json.loads(record.notify_attempts or "[]"),
        created_at=aware_utc(record.created_at),
        started_at=aware_utc(record.started_at),
        finished_at=aware_utc(record.finished_at),
    )


class ExecutionReader:
    def __init__(self, context: Context) -> None:
        self._db = context.db
        self._registry = context.registry
        self._changes = context.changes
        self._artifacts_dir = context.settings.artifacts_dir
        self._node_id = context.settings.node_id

    async def record(self, execution_id: str) -> Execution:
        record = await self._db.call(crud.get_execution, execution_id=execution_id)
        if record is None:
            raise NotFoundError(f"execution {execution_id} not found")
        return record

    async def readable(self, principal: Principal, execution_id: str) -> Execution:
        """The record, if this principal may read it (else NotFoundError)."""
        record = await self._db.call(crud.get_execution, execution_id=execution_id)
        return principal.readable(record, f"execution {execution_id}")

    def live_for(self, principal: Principal, execution_id: str) -> LiveExecution | None:
        live = self._registry.get(execution_id)
        if live is None or not principal.may_read(live.owner):
            return None
        return live

    async def wait_for_terminal(
        self, execution_id: str, within: float, *, elsewhere: bool = False
    ) -> Execution:
        """`elsewhere`: the record is another replica's (its owner stopping, or silent), so
        its end is written there and never notified here: the database is read again every
        ELSEWHERE_POLL_SECONDS."""
        return await self._changes.wait_until(
            execution_id,
            lambda: self.record(execution_id),
            is_terminal,
            within,
            poll=ELSEWHERE_POLL_SECONDS if elsewhere else None,
        )

    async def wait_past_approval(self, execution_id: str, within: float) -> Execution:
        """The record once it no longer awaits approval (started, rejected or cancelled)."""
        return await self._changes.wait_until(
            execution_id,
            lambda: self.record(execution_id),
            lambda record: record.state != ExecutionState.awaiting_approval,
            within,
        )

    async def get(
        self, principal: Principal, execution_id: str, wait: float = 0
    ) -> ExecutionPublic:
        record = await self.readable(principal, execution_id)
        if wait > 0 and not is_terminal(record):
            elsewhere = record.node not in (None, self._node_id)
            record = await self.wait_for_terminal(execution_id, wait, elsewhere=elsewhere)
        approval = None
        if record.approval_id and record.state == ExecutionState.awaiting_approval:
            approval = await self._db.call(crud.get_approval, approval_id=record.approval_id)
        return to_public(record, self._registry.get(execution_id), approval)

    async def list_page(
        self, principal: Principal, *, states: list[str] | None, limit: int, cursor: str | None
    ) -> tuple[list[ExecutionPublic], str | None]:
        decoded = None
        if cursor:
            try:
                decoded = crud.decode_cursor(cursor)
            except (ValueError, TypeError) as error:
                raise InvalidRequestError("invalid cursor") from error
        for state in states or []:
            if state not in ExecutionState.__members__:
                raise InvalidRequestError(f"unknown state: {state}")
        owner = None if principal.reads_everything else principal.name
        records = await self._db.call(
            crud.list_executions, owner=owner, states=states, limit=limit + 1, cursor=decoded
        )
        kept = _within_page_bytes(records[:limit])
        more = len(records) > kept
        next_cursor = crud.encode_cursor(records[kept - 1]) if more else None
        page = [to_public(record, self._registry.get(record.id)) for record in records[:kept]]
        return page, next_cursor

    async def open_finished_log(self, execution_id: str) -> ArtifactLog | None:
        """The log of an execution that is no longer live; None when it never started
        (rejected, cancelled while awaiting approval). One that started and has no log here is
        an error (`_missing_log`), never an empty log."""
        log = await run_blocking(
            functools.partial(_open_finished_log, self._artifacts_dir, execution_id)
        )
        if log is not None:
            return log
        record = await self.record(execution_id)
        if record.started_at is None:
            return None
        raise self._missing_log(record)

    def _missing_log(self, record: Execution) -> AppError:
        """Why an execution that ran has no log here: the replica that ran it keeps it on its
        own disk and does not answer (a live one is asked by the forwarding), or it was
        deleted from this data directory. Either way the reader must not take the silence
        for an empty log."""
        if record.node and record.node != self._node_id:
            return LogOwnerUnreachableError(record.id, record.node)
        return OutputGoneError(record.id)

    async def read_output(
        self, principal: Principal, execution_id: str, offset: int, limit: int
    ) -> OutputPage:
        """Raw log bytes from `offset`. Past the artifact cap the middle of the stream is gone:
        a read there is empty and `next_offset` jumps to the kept tail, so a client that
        concatenates pages never splices the tail onto an earlier offset unknowingly."""
        record = await self.readable(principal, execution_id)
        live = self._registry.get(execution_id)
        complete = live is None and is_terminal(record)
        artifacts_dir = self._artifacts_dir

        def read() -> OutputPage | None:
            """None: there is no log here."""
            # A finished log is opened and read in the same worker-thread hop.
            log = _log_here(live, artifacts_dir, execution_id)
            if log is None:
                return None
            kept_from = log.next_available(offset)
            if kept_from != offset:
                return OutputPage(b"", log.total_bytes, complete, kept_from)
            data = log.read(offset, limit)
            return OutputPage(data, log.total_bytes, complete, offset + len(data))

        page = await run_blocking(read)
        if page is not None:
            return page
        if record.started_at is None:  # never started (rejected, withdrawn): nothing was written
            return OutputPage(b"", 0, complete, offset)
        raise self._missing_log(record)

    async def search_output(
        self, principal: Principal, execution_id: str, query: str, limit: int, ignore_case: bool
    ) -> tuple[LogSearch, int, bool]:
        """The lines of the whole log holding `query` (app/output/search.py), the log's size
        and whether it is complete, read on a worker thread."""
        record = await self.readable(principal, execution_id)
        live = self._registry.get(execution_id)
        complete = live is None and is_terminal(record)
        artifacts_dir = self._artifacts_dir

        def search() -> tuple[LogSearch, int] | None:
            log = _log_here(live, artifacts_dir, execution_id)
            if log is None:
                return None
            total = log.total_bytes
            return search_log(log, query, ignore_case=ignore_case, limit=limit), total

        found = await run_blocking(search)
        if found is not None:
            return found[0], found[1], complete
        if record.started_at is None:  # never started: nothing was written, nothing matches
            return LogSearch(), 0, complete
        raise self._missing_log(record)


def _log_here(
    live: LiveExecution | None, artifacts_dir: Path, execution_id: str
) -> ArtifactLog | None:
    """The execution's log: the live one's, or the finished one on this disk (blocking); None
    when this disk has none."""
    if live is not None:
        return live.log
    return _open_finished_log(artifacts_dir, execution_id)


def _open_finished_log(artifacts_dir: Path, execution_id: str) -> ArtifactLog | None:
    """The finished execution's log on this disk (blocking), None when it is not there. A server
    out of descriptors cannot tell: that is raised, never reported as a log that is gone."""
    try:
        return ArtifactLog.open_existing(artifacts_dir, execution_id)
    except OSError as error:
        if is_descriptors_exhausted(error):
            raise DescriptorsExhaustedError() from error
        return None


# A page is serialised on the event loop, and a record carries its command (up to 64 KiB) and
# its output window: 500 of them were 34 MB of JSON that stalled every client 0.1-0.2 s
# (RELIABILITY.md, "One request against all the others"). A page ends before this much.
PAGE_MAX_BYTES = 4 * 1024 * 1024
_RECORD_OVERHEAD = 1024  # ids, times, sizes, flags


def _within_page_bytes(records: list[Execution]) -> int:
    """How many of `records` make a page of at most PAGE_MAX_BYTES (roughly: the long text
    fields count, twice the output for the text block), and always at least one."""
    total = 0
    for count, record in enumerate(records):
        total += _RECORD_OVERHEAD + len(record.command) + len(record.notices)
        total += 2 * len(record.output or "") + len(recorded_text(record) or "")
        if total > PAGE_MAX_BYTES and count > 0:
            return count
    return len(records)
