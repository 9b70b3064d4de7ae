"""Human approvals (SPEC §5.2): request, decide, expire, and tell whoever is listening.

The execution side registers `on_settled`, which starts or rejects the execution once an
approval leaves `pending`; this module knows nothing about processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from app import crud
from app.auth import Principal
from app.db import Database
from app.errors import ConflictError, ForbiddenError, NotFoundError
from app.models import Approval, ApprovalState

logger = logging.getLogger("shellgate.approvals")

SettledHandler = Callable[[Approval], Awaitable[None]]
LISTENER_QUEUE_SIZE = 1000


def new_approval_id() -> str:
    return "ap_" + secrets.token_urlsafe(15)


def approval_event(kind: str, approval: Approval) -> dict[str, Any]:
    return {"type": kind, "approval": approval_to_dict(approval)}


def approval_to_dict(approval: Approval) -> dict[str, Any]:
    data = approval.model_dump()
    for key in ("created_at", "decided_at", "expires_at"):
        value = data.get(key)
        if isinstance(value, datetime):
            data[key] = value.isoformat()
    return data


class ApprovalService:
    def __init__(self, db: Database, *, timeout_seconds: float) -> None:
        self._db = db
        self._timeout = timeout_seconds
        self._expiry: dict[str, asyncio.TimerHandle] = {}
        self._listeners: set[asyncio.Queue[dict[str, Any]]] = set()
        self._tasks: set[asyncio.Task[Approval | None]] = set()
        self.on_settled: SettledHandler | None = None

    # --- requests ---------------------------------------------------------------------------

    async def request(
        self, *, execution_id: str, command: str, cwd: str, reason: str, requested_by: str
    ) -> Approval:
        now = datetime.now(UTC)
        approval = Approval(
            id=new_approval_id(),
            execution_id=execution_id,
            command=command,
            cwd=cwd,
            reason=reason,
            requested_by=requested_by,
            created_at=now,
            expires_at=now + timedelta(seconds=self._timeout),
        )
        approval = await self._db.call(crud.insert_approval, approval=approval)
        self._arm_expiry(approval)
        self._publish(approval_event("approval.requested", approval))
        logger.info("approval %s requested for %s: %s", approval.id, execution_id, reason)
        return approval

    async def restore(self) -> int:
        """After a restart: pending approvals stay pending, with their expiry timers re-armed."""
        pending = await self._db.call(crud.pending_approvals)
        for approval in pending:
            self._arm_expiry(approval)
        return len(pending)

    # --- decisions --------------------------------------------------------------------------

    async def decide(
        self, *, approval_id: str, approve: bool, principal: Principal, reason: str | None
    ) -> Approval:
        if principal.role not in ("approver", "admin"):
            # Agents never decide, not even on their own executions.
            raise ForbiddenError("only an approver or an admin can decide approvals")
        state = ApprovalState.approved if approve else ApprovalState.denied
        return await self._settle(approval_id, state, decided_by=principal.name, reason=reason)

    async def expire(self, approval_id: str) -> Approval | None:
        try:
            return await self._settle(
                approval_id, ApprovalState.expired, decided_by="system", reason="approval expired"
            )
        except (ConflictError, NotFoundError):
            return None

    async def withdraw(self, approval_id: str, *, by: str) -> None:
        """The execution was cancelled while it waited: the approval can no longer be granted."""
        with contextlib.suppress(ConflictError, NotFoundError):
            await self._settle(
                approval_id,
                ApprovalState.expired,
                decided_by=by,
                reason="execution cancelled by its requester",
                notify_execution=False,
            )

    async def _settle(
        self,
        approval_id: str,
        state: ApprovalState,
        *,
        decided_by: str,
        reason: str | None,
        notify_execution: bool = True,
    ) -> Approval:
        changed = await self._db.call(
            crud.decide_approval,
            approval_id=approval_id,
            state=state,
            decided_by=decided_by,
            decision_reason=reason,
            decided_at=datetime.now(UTC),
        )
        approval = await self._db.call(crud.get_approval, approval_id=approval_id)
        if approval is None:
            raise NotFoundError(f"approval {approval_id} not found")
        if not changed:
            raise ConflictError(
                f"approval {approval_id} is already {approval.state}",
                details={"state": approval.state},
            )
        handle = self._expiry.pop(approval_id, None)
        if handle is not None:
            handle.cancel()
        logger.info(
            "approval %s %s by %s (%s)", approval_id, state.value, decided_by, reason or "-"
        )
        self._publish(approval_event("approval.decided", approval))
        if notify_execution and self.on_settled is not None:
            await self.on_settled(approval)
        return approval

    # --- reads ------------------------------------------------------------------------------

    async def get(self, approval_id: str, principal: Principal) -> Approval:
        approval = await self._db.call(crud.get_approval, approval_id=approval_id)
        if approval is None or not _may_read(principal, approval):
            raise NotFoundError(f"approval {approval_id} not found")
        return approval

    async def list(self, principal: Principal, *, state: str | None, limit: int) -> list[Approval]:
        requested_by = None if principal.reads_everything else principal.name
        return await self._db.call(
            crud.list_approvals, state=state, requested_by=requested_by, limit=limit
        )

    # --- listeners (WebSocket /v1/approvals/stream) -----------------------------------------

    def subscribe(self) -> asyncio.Queue[dict[str, Any]]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(LISTENER_QUEUE_SIZE)
        self._listeners.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[dict[str, Any]]) -> None:
        self._listeners.discard(queue)

    def _publish(self, event: dict[str, Any]) -> None:
        for queue in list(self._listeners):
            try:
                queue.put_nowait(event)
            except asyncio.QueueFull:
                # A listener that stopped reading is dropped, never allowed to stall deciders;
                # it reconnects and lists pending approvals again.
                self._listeners.discard(queue)
                with contextlib.suppress(asyncio.QueueFull):
                    queue.put_nowait({"type": "overflow"})

    # --- expiry -----------------------------------------------------------------------------

    def _arm_expiry(self, approval: Approval) -> None:
        loop = asyncio.get_running_loop()
        expires_at = approval.expires_at
        if expires_at.tzinfo is None:  # SQLite hands back naive datetimes
            expires_at = expires_at.replace(tzinfo=UTC)
        delay = max(0.0, (expires_at - datetime.now(UTC)).total_seconds())
        self._expiry[approval.id] = loop.call_later(delay, self._spawn_expire, approval.id)

    def _spawn_expire(self, approval_id: str) -> None:
        self._expiry.pop(approval_id, None)
        task = asyncio.create_task(self.expire(approval_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for handle in self._expiry.values():
            handle.cancel()
        self._expiry.clear()
        for task in list(self._tasks):
            task.cancel()


def _may_read(principal: Principal, approval: Approval) -> bool:
    return principal.reads_everything or approval.requested_by == principal.name
