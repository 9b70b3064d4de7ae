"""A `prompt`ed file operation asks a human through the same approvals as commands.

An approval belongs to an execution record, so each prompted operation gets one as its anchor:
an execution that never runs a process, whose command is the operation's description
(`[file write] /path (N bytes)`), visible and cancellable like any execution awaiting approval.
The approvals' settle hook is wrapped so that a decision on such an approval comes here, never
to the command runner, and its anchor ends `completed` (approved) or `rejected`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime

from app.approvals.service import ApprovalService, new_approval_id
from app.core.config import Settings
from app.executions.draft import new_execution_id
from app.output.artifact_log import artifact_log_path
from app.store import crud
from app.store.db import Database
from app.store.models import (
    Approval,
    ApprovalState,
    Execution,
    ExecutionMode,
    ExecutionState,
    FileOperation,
)

logger = logging.getLogger("shellgate.files")


class FileApprovals:
    def __init__(self, settings: Settings, db: Database, approvals: ApprovalService) -> None:
        self._settings = settings
        self._db = db
        self._approvals = approvals
        self._waiters: dict[str, asyncio.Future[Approval]] = {}
        self._commands = approvals.on_settled
        approvals.on_settled = self._settled

    async def request(self, record: FileOperation, description: str, reason: str) -> None:
        """Record `record` (state awaiting_approval) with its anchor and a pending approval
        (`record.approval_id`, assigned by the caller so that it can wait on it first)."""
        execution_id = new_execution_id()
        record.approval_id = record.approval_id or new_approval_id()
        record.execution_id = execution_id
        await self._db.call(crud.insert_file_operation, record=record)
        anchor = Execution(
            id=execution_id,
            owner=record.owner,
            command=description,
            original_command=description,
            cwd=record.path.rsplit("/", 1)[0] or "/",
            state=ExecutionState.awaiting_approval.value,
            mode=ExecutionMode.foreground.value,
            artifact_path=str(artifact_log_path(self._settings.artifacts_dir, execution_id)),
            approval_id=record.approval_id,
            created_at=datetime.now(UTC),
        )
        logger.info(
            "file %s of %s by %s awaits approval %s",
            record.op,
            record.path,
            record.owner,
            record.approval_id,
        )
        try:
            await self._approvals.request(anchor, reason=reason, kind="file")
        except Exception as error:
            message = getattr(error, "message", "the approval could not be requested")
            await self._db.call(
                crud.update_file_operation,
                operation_id=record.id,
                values={"state": "failed", "message": message, "finished_at": datetime.now(UTC)},
            )
            raise

    def waiter(self, approval_id: str) -> asyncio.Future[Approval]:
        future = self._waiters.get(approval_id)
        if future is None or future.done():
            future = asyncio.get_running_loop().create_future()
            self._waiters[approval_id] = future
        return future

    def forget(self, approval_id: str, future: asyncio.Future[Approval]) -> None:
        if self._waiters.get(approval_id) is future:
            del self._waiters[approval_id]

    async def _settled(self, approval: Approval) -> None:
        record = await self._db.call(crud.file_operation_by_approval, approval_id=approval.id)
        if record is None:
            if self._commands is not None:
                await self._commands(approval)
            return
        await self.settle(record, approval)
        future = self._waiters.pop(approval.id, None)
        if future is not None and not future.done():
            future.set_result(approval)

    async def settle(self, record: FileOperation, approval: Approval) -> str:
        """Bring the record and its anchor in line with a decided approval; the new state."""
        approved = approval.state == ApprovalState.approved.value
        state = "approved" if approved else "rejected"
        by = approval.decided_by or "system"
        if approved:
            notice = (
                f"{record.op} of {record.path} approved by {by}; it runs in the call that asked"
            )
        else:
            why = approval.decision_reason or "no reason given"
            notice = f"Approval {approval.state} by {by}: {why}"
        now = datetime.now(UTC)
        if await self._db.call(
            crud.claim_file_operation,
            operation_id=record.id,
            from_state="awaiting_approval",
            to_state=state,
        ):
            await self._db.call(
                crud.update_file_operation,
                operation_id=record.id,
                values={"message": None if approved else notice},
            )
        if record.execution_id is not None:
            await self._db.run(
                crud.finish_execution,
                execution_id=record.execution_id,
                values={
                    "state": (
                        ExecutionState.completed if approved else ExecutionState.rejected
                    ).value,
                    "notices": json.dumps([notice]),
                    "text": notice,
                    "finished_at": now,
                },
            )
        return state
