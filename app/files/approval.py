"""A `prompt`ed file operation asks a human through the same approvals as commands.

The operation is the approval's subject (`file_operation`): its record and its pending approval
are written together, and no execution record is involved. `FileApprovals.settled` is the
handler it gives the approvals for that subject as it is built: a decision (or an expiry) moves the
record to `approved` or `rejected` and wakes the call holding for it.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from app.approvals.service import ApprovalService
from app.core.errors import AppError
from app.store import crud
from app.store.db import Database
from app.store.models import Approval, ApprovalState, FileOperation

logger = logging.getLogger("shellgate.files")

WITHDRAWN_REASON = "file operation cancelled by its requester"


class FileApprovals:
    def __init__(self, db: Database, approvals: ApprovalService) -> None:
        self._db = db
        self._approvals = approvals
        approvals.settles("file_operation", self.settled)
        self._waiters: dict[str, asyncio.Future[Approval]] = {}

    async def request(self, record: FileOperation, description: str, reason: str) -> None:
        """Record `record` (state awaiting_approval) with its pending approval
        (`record.approval_id`, assigned by the caller so that it can wait on it first). Refused
        (the owner's cap of pending approvals): the record is kept `failed`, and the error
        goes on to the caller."""
        assert record.approval_id is not None
        cwd = record.path.rsplit("/", 1)[0] or "/"
        try:
            await self._approvals.request_file(
                record, description=description, cwd=cwd, reason=reason
            )
        except AppError as error:
            record.state, record.message = "failed", error.message
            record.finished_at = datetime.now(UTC)
            await self._db.call(crud.insert_file_operation, record=record)
            raise
        logger.info(
            "file %s of %s by %s awaits approval %s",
            record.op,
            record.path,
            record.owner,
            record.approval_id,
        )

    def waiter(self, approval_id: str) -> asyncio.Future[Approval]:
        future = self._waiters.get(approval_id)
        if future is None or future.done():
            future = asyncio.get_running_loop().create_future()
            self._waiters[approval_id] = future
        return future

    def forget(self, approval_id: str, future: asyncio.Future[Approval]) -> None:
        if self._waiters.get(approval_id) is future:
            del self._waiters[approval_id]

    async def settled(self, approval: Approval) -> None:
        """The approvals' handler for subject `file_operation`."""
        if approval.file_operation_id is None:
            return
        record = await self._db.call(
            crud.file_operation_by_id, operation_id=approval.file_operation_id
        )
        if record is not None:
            await self.settle(record, approval)
        future = self._waiters.pop(approval.id, None)
        if future is not None and not future.done():
            future.set_result(approval)

    async def settle(self, record: FileOperation, approval: Approval) -> str:
        """Bring the record in line with a decided approval; the new state."""
        approved = approval.state == ApprovalState.approved.value
        state = "approved" if approved else "rejected"
        by = approval.decided_by or "system"
        why = approval.decision_reason or "no reason given"
        await self._db.call(
            crud.claim_file_operation,
            operation_id=record.id,
            from_state="awaiting_approval",
            to_state=state,
            message=None if approved else f"Approval {approval.state} by {by}: {why}",
            finished=not approved,
        )
        return state
