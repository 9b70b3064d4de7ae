"""A new session asking for more than the policy's sandbox profile asks a human first, through
the same approvals as commands (docs/policy.md#sessions-and-the-sandbox).

The approval's subject is `session`: it is kept, for now, on an execution record that never runs
a process, whose command describes the request (`[new session] sandbox: write /srv/x`) and whose
stored request holds the profile that would be granted. `SessionSandboxApprovals.settled` is the
handler the approvals are built with for that subject: the record ends `completed` (approved) or
`rejected`. The session itself is made by the call
that asked, or by a retry naming the approval (`approval_id`), once: taking the grant clears it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from datetime import UTC, datetime
from typing import Any

from app.approvals.service import ApprovalService, new_approval_id
from app.core.auth import Principal
from app.core.config import Settings
from app.core.errors import ConflictError, NotFoundError
from app.executions.approval_flow import rejection
from app.executions.draft import new_execution_id
from app.executions.sandboxing import SandboxDecision
from app.output.artifact_log import artifact_log_path
from app.store import crud
from app.store.db import Database
from app.store.models import Approval, ApprovalState, Execution, ExecutionMode, ExecutionState

logger = logging.getLogger("shellgate.sessions")

# The key of an anchor's stored request: the grant, and what was asked (to match a retry).
GRANT_KEY = "new_session_sandbox"
ANCHOR_PREFIX = "[new session] sandbox: "


class SessionSandboxApprovals:
    def __init__(self, settings: Settings, db: Database) -> None:
        self._settings = settings
        self._db = db
        self._waiters: dict[str, asyncio.Future[Approval]] = {}

    async def ask(
        self,
        approvals: ApprovalService,
        principal: Principal,
        decision: SandboxDecision,
        *,
        cwd: str,
        wait: float,
    ) -> Approval:
        """Record the anchor and its pending approval, then hold up to `wait` seconds for the
        decision. Returns the approval as it is then (pending, or decided)."""
        request = decision.approval_request()
        assert request is not None  # only asked when something is beyond the profile
        approval_id = new_approval_id()
        description = ANCHOR_PREFIX + decision.ask.describe()
        anchor = Execution(
            id=new_execution_id(),
            owner=principal.name,
            command=description,
            original_command=description,
            cwd=cwd,
            state=ExecutionState.awaiting_approval.value,
            mode=ExecutionMode.foreground.value,
            artifact_path="",
            approval_id=approval_id,
            pending_request=json.dumps(
                {GRANT_KEY: {"granted": decision.profile.to_record(), "asked": _asked(request)}}
            ),
            created_at=datetime.now(UTC),
        )
        anchor.artifact_path = str(artifact_log_path(self._settings.artifacts_dir, anchor.id))
        # Registered before the approval exists, so that even an instant decision is seen.
        future = self._waiter(approval_id)
        try:
            await approvals.request(
                anchor,
                subject="session",
                reason="Sandbox escalation requested for a new session: " + decision.ask.describe(),
                kind="sandbox",
                sandbox_request=request,
            )
            logger.info(
                "a session for %s awaits approval %s: %s", principal.name, approval_id, description
            )
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(future), wait)
        finally:
            if self._waiters.get(approval_id) is future:
                del self._waiters[approval_id]
        approval = await self._db.call(crud.get_approval, approval_id=approval_id)
        assert approval is not None  # written above, never deleted while pending
        return approval

    async def take(
        self, principal: Principal, approval_id: str, request: dict[str, Any]
    ) -> dict[str, Any] | Approval:
        """The granted profile (record form) of an approved request for this very ask, taken
        once; the approval itself while it is still pending. Denied or expired:
        ApprovalRejectedError; another owner's, or not a session's: NotFoundError; another
        ask, or already taken: ConflictError."""
        approval = await self._db.call(crud.get_approval, approval_id=approval_id)
        if approval is None or approval.requested_by != principal.name:
            raise NotFoundError(f"no session request of yours waits on approval {approval_id}")
        anchor = (
            None
            if approval.subject != "session" or approval.execution_id is None
            else await self._db.call(crud.get_execution, execution_id=approval.execution_id)
        )
        if anchor is None or not anchor.command.startswith(ANCHOR_PREFIX):
            raise NotFoundError(f"approval {approval_id} is not for a new session's sandbox")
        stored = json.loads(anchor.pending_request or "{}").get(GRANT_KEY)
        if stored is None:
            raise ConflictError(f"approval {approval_id} was already used to create a session")
        if stored["asked"] != _asked(request):
            raise ConflictError(
                f"approval {approval_id} is for {anchor.command.removeprefix(ANCHOR_PREFIX)}, "
                "not for this request's sandbox"
            )
        if approval.state == ApprovalState.pending:
            return approval
        if approval.state != ApprovalState.approved:
            raise rejection(approval)
        taken = await self._db.call(
            crud.take_pending_request,
            execution_id=anchor.id,
            pending_request=anchor.pending_request,
        )
        if not taken:
            raise ConflictError(f"approval {approval_id} was already used to create a session")
        granted: dict[str, Any] = stored["granted"]
        return granted

    def _waiter(self, approval_id: str) -> asyncio.Future[Approval]:
        future: asyncio.Future[Approval] = asyncio.get_running_loop().create_future()
        self._waiters[approval_id] = future
        return future

    async def settled(self, approval: Approval) -> None:
        """The approvals' handler for subject `session`."""
        if approval.execution_id is None:
            return
        anchor = await self._db.call(crud.get_execution, execution_id=approval.execution_id)
        if anchor is None:
            return
        approved = approval.state == ApprovalState.approved
        by = approval.decided_by or "system"
        if approved:
            notice = f"Approved by {by}; the session is created by the call that asked"
        else:
            why = approval.decision_reason or "no reason given"
            notice = f"Approval {approval.state} by {by}: {why}"
        await self._db.run(
            crud.finish_execution,
            execution_id=anchor.id,
            values={
                "state": (ExecutionState.completed if approved else ExecutionState.rejected).value,
                "notices": json.dumps([notice]),
                "text": notice,
                "finished_at": datetime.now(UTC),
            },
        )
        future = self._waiters.pop(approval.id, None)
        if future is not None and not future.done():
            future.set_result(approval)


def _asked(request: dict[str, Any]) -> dict[str, Any]:
    """What a retry must ask again to use the grant: the same writes and network."""
    return {"write": request["write"], "network": request["network"]}
