"""A new session asking for more than the policy's sandbox profile asks a human first, through
the same approvals as commands (docs/policy.md#sessions-and-the-sandbox).

The approval's subject is `session`: the approval is the only record of the request (its
command describes it, `[new session] sandbox: write /srv/x`) and keeps the profile it would
grant (`session_grant`). No execution is written: nothing runs until the session exists.
`SessionSandboxApprovals.settled` is the handler it gives the approvals for that subject as it
is built: it wakes the call that asked. The session itself is made by that call, or by a retry
naming the approval (`approval_id`), once: taking the grant clears it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from app.approvals.service import ApprovalService, new_approval_id
from app.core.auth import Principal
from app.core.errors import ConflictError, NotFoundError
from app.executions.approval_flow import rejection
from app.executions.sandboxing import SandboxDecision
from app.store import crud
from app.store.db import Database
from app.store.models import Approval, ApprovalState

logger = logging.getLogger("shellgate.sessions")

DESCRIPTION_PREFIX = "[new session] sandbox: "


class SessionSandboxApprovals:
    def __init__(self, db: Database, approvals: ApprovalService) -> None:
        self._db = db
        self._approvals = approvals
        approvals.settles("session", self.settled)
        self._waiters: dict[str, asyncio.Future[Approval]] = {}

    async def ask(
        self, principal: Principal, decision: SandboxDecision, *, cwd: str, wait: float
    ) -> Approval:
        """Record the pending approval, then hold up to `wait` seconds for the decision.
        Returns the approval as it is then (pending, or decided)."""
        request = decision.approval_request()
        assert request is not None  # only asked when something is beyond the profile
        approval_id = new_approval_id()
        description = DESCRIPTION_PREFIX + decision.ask.describe()
        # Registered before the approval exists, so that even an instant decision is seen.
        future = self._waiter(approval_id)
        try:
            await self._approvals.request_session(
                approval_id=approval_id,
                owner=principal.name,
                description=description,
                cwd=cwd,
                reason="Sandbox escalation requested for a new session: " + decision.ask.describe(),
                sandbox_request=request,
                grant={"granted": decision.profile.to_record(), "asked": _asked(request)},
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
        if approval.subject != "session":
            raise NotFoundError(f"approval {approval_id} is not for a new session's sandbox")
        grant = approval.session_grant
        if grant is None:
            raise ConflictError(f"approval {approval_id} was already used to create a session")
        stored = json.loads(grant)
        if stored["asked"] != _asked(request):
            raise ConflictError(
                f"approval {approval_id} is for "
                f"{approval.command.removeprefix(DESCRIPTION_PREFIX)}, "
                "not for this request's sandbox"
            )
        if approval.state == ApprovalState.pending:
            return approval
        if approval.state != ApprovalState.approved:
            raise rejection(approval)
        taken = await self._db.call(crud.take_session_grant, approval_id=approval.id, grant=grant)
        if not taken:
            raise ConflictError(f"approval {approval_id} was already used to create a session")
        granted: dict[str, Any] = stored["granted"]
        return granted

    def _waiter(self, approval_id: str) -> asyncio.Future[Approval]:
        future: asyncio.Future[Approval] = asyncio.get_running_loop().create_future()
        self._waiters[approval_id] = future
        return future

    async def settled(self, approval: Approval) -> None:
        """The approvals' handler for subject `session`: the request has no record to end
        (the approval is its record); the call holding for it, if any, hears of it."""
        future = self._waiters.pop(approval.id, None)
        if future is not None and not future.done():
            future.set_result(approval)


def _asked(request: dict[str, Any]) -> dict[str, Any]:
    """What a retry must ask again to use the grant: the same writes and network."""
    return {"write": request["write"], "network": request["network"]}
