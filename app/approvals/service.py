"""Human approvals (docs/policy.md#approvals): request, decide, expire, and tell whoever is
listening.

An approval names its subject (`ApprovalSubject`): an execution, a file operation, or a new
session's sandbox. The approvals are built first (app/services.py) and given to each owner of
a kind of subject, which names its handler as it is built (`settles`); a decided approval goes
to its subject's handler, which starts or rejects the execution, ends the file operation, or
wakes the call that asked for a session. The start (`restore`) refuses to run with a subject
nobody settles. Whoever hears of every request and decision (the approvers' notifications,
the other replicas) is given at construction (`listeners`). This module knows nothing about
processes or files.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, get_args

from app.core.auth import Principal
from app.core.errors import (
    ConflictError,
    ForbiddenError,
    NotFoundError,
    PendingApprovalLimitError,
)
from app.core.random_ids import random_token
from app.observability.events import execution_event
from app.observability.metrics import Metrics
from app.schemas import ApprovalPublic, SandboxRequestPublic
from app.store import crud
from app.store.db import Database
from app.store.models import (
    Approval,
    ApprovalKind,
    ApprovalState,
    ApprovalSubject,
    Execution,
    FileOperation,
)
from app.store.timestamps import aware_utc

logger = logging.getLogger("shellgate.approvals")

# Told of each decision on an approval of its subject kind: it settles the subject.
SettledHandler = Callable[[Approval], Awaitable[None]]
# Told of this server's own requests and decisions, with the event's type (`approval.requested`
# or `approval.decided`): the approvers' notifications (app/notifications/approvals.py) and the
# other replicas (app/cluster/notify.py).
AnnouncementHandler = Callable[[str, Approval], None]
# Approvals whose last published state is remembered, so that one heard of twice (a
# notification and the polling fallback) reaches the listeners once.
REMEMBERED_APPROVALS = 10_000
# Events a listener may leave unread before it is dropped (it then gets `overflow`).
LISTENER_QUEUE_SIZE = 1000
OVERFLOW_EVENT: dict[str, Any] = {"type": "overflow"}
WITHDRAWN_REASON = "execution cancelled by its requester"
# A runner call's approval once its caller cannot be answered (executions/approval_flow.py).
RETRY_WITHDRAWN_REASON = "the runner's caller was told to retry when the server stopped"


def require_decider(principal: Principal) -> None:
    if principal.role not in ("approver", "admin"):
        # Agents never decide, not even on their own executions.
        raise ForbiddenError("only an approver or an admin can decide approvals")


def new_approval_id() -> str:
    return "ap_" + random_token(15)


def approval_public(approval: Approval) -> ApprovalPublic:
    """The wire form (the fields of docs/policy.md#approvals), with timezone-aware timestamps."""
    return ApprovalPublic(
        id=approval.id,
        subject=approval.subject,
        execution_id=approval.execution_id,
        file_operation_id=approval.file_operation_id,
        command=approval.command,
        cwd=approval.cwd,
        env=json.loads(approval.env),
        session=approval.session_id,
        pty=approval.pty,
        reason=approval.reason,
        kind=approval.kind,
        sandbox_request=None
        if approval.sandbox_request is None
        else SandboxRequestPublic.model_validate_json(approval.sandbox_request),
        state=ApprovalState(approval.state),
        requested_by=approval.requested_by,
        decided_by=approval.decided_by,
        decision_reason=approval.decision_reason,
        created_at=aware_utc(approval.created_at),
        decided_at=aware_utc(approval.decided_at),
        expires_at=aware_utc(approval.expires_at),
        suggested_pattern=approval.suggested_pattern,
        remembered_rule=approval.remembered_rule,
    )


def approval_event(kind: str, approval: Approval) -> dict[str, Any]:
    return {"type": kind, "approval": approval_public(approval).model_dump(mode="json")}


class ApprovalService:
    def __init__(
        self,
        db: Database,
        *,
        timeout_seconds: float,
        listeners: Sequence[AnnouncementHandler] = (),
        metrics: Metrics | None = None,
        max_pending_per_owner: int = 50,
    ) -> None:
        self._db = db
        self._metrics = metrics
        self._timeout = timeout_seconds
        self._max_pending = max_pending_per_owner
        self._expiry: dict[str, asyncio.TimerHandle] = {}
        # Unbounded queues with the bound enforced in `_publish`, so that the `overflow` marker
        # always fits behind the events a slow listener left unread.
        self._listeners: set[asyncio.Queue[dict[str, Any]]] = set()
        self._tasks: set[asyncio.Task[Approval | None]] = set()
        # Filled by the subjects' owners as they are built (`settles`), before the start.
        self._subjects: dict[str, SettledHandler] = {}
        self._announced = tuple(listeners)
        self._published: OrderedDict[str, str] = OrderedDict()
        # Approvals whose decision this process is writing and handing to their subject now
        # (`_settle`), each with how many requests are at it. The replicas' polling fallback
        # (app/cluster/notify.py) reads a decision as soon as it is committed, and would
        # otherwise settle it from a task of its own before the request that made it does:
        # the command would start outside the approver's request (its trace a root of its
        # own, CI saw it), in a race the request then only waits out.
        self._deciding: Counter[str] = Counter()

    def settles(self, subject: ApprovalSubject, handler: SettledHandler) -> None:
        """`handler` settles the decided approvals of `subject`: called once per subject, by
        its owner's constructor (app/services.py builds them all before the start)."""
        if subject in self._subjects:
            raise ValueError(f"the approvals of {subject} already have their handler")
        self._subjects[subject] = handler

    # --- requests ---------------------------------------------------------------------------

    async def request(
        self,
        execution: Execution,
        *,
        reason: str,
        env: dict[str, str] | None = None,
        suggested_pattern: str | None = None,
        kind: ApprovalKind = "command",
        sandbox_request: dict[str, Any] | None = None,
    ) -> Approval:
        """Record a pending approval (id `execution.approval_id`) for `execution`, which is
        written in the same transaction: no execution ever waits on an approval that does not
        exist. The approval shows everything that will run: the command, the cwd, `env` (all
        the variables the request sets), the session and whether it runs in a PTY; `kind`
        says what is asked (a command, a sandbox beyond the profile) and `sandbox_request`
        what a `sandbox` one asks beyond it.

        One owner holds at most `max_pending_per_owner` pending approvals: the count and the
        insert are one database transaction (see `crud.insert_awaiting`), so requests racing
        each other cannot pass the cap together. Beyond it: PendingApprovalLimitError, and
        nothing is written.
        """
        if execution.approval_id is None:
            raise ValueError(f"execution {execution.id} names no approval")
        now = datetime.now(UTC)
        approval = Approval(
            id=execution.approval_id,
            subject="execution",
            execution_id=execution.id,
            command=execution.original_command,
            cwd=execution.cwd,
            env=json.dumps(env or {}),
            session_id=execution.session_id,
            pty=execution.pty,
            reason=reason,
            requested_by=execution.owner,
            suggested_pattern=suggested_pattern,
            kind=kind,
            sandbox_request=None if sandbox_request is None else json.dumps(sandbox_request),
            created_at=now,
            expires_at=now + timedelta(seconds=self._timeout),
        )
        return await self._insert(execution, approval)

    async def request_file(
        self, operation: FileOperation, *, description: str, cwd: str, reason: str
    ) -> Approval:
        """Record `operation` (awaiting approval, `approval_id` set) and its pending approval
        in one transaction; what is asked is `description` (`[file write] /path (N bytes)`)
        in `cwd`, the file's directory. The cap is the one of `request`."""
        if operation.approval_id is None:
            raise ValueError(f"file operation {operation.id} names no approval")
        now = datetime.now(UTC)
        approval = Approval(
            id=operation.approval_id,
            subject="file_operation",
            file_operation_id=operation.id,
            command=description,
            cwd=cwd,
            reason=reason,
            requested_by=operation.owner,
            kind="file",
            created_at=now,
            expires_at=now + timedelta(seconds=self._timeout),
        )
        return await self._insert(operation, approval)

    async def request_session(
        self,
        *,
        approval_id: str,
        owner: str,
        description: str,
        cwd: str,
        reason: str,
        sandbox_request: dict[str, Any],
        grant: dict[str, Any],
    ) -> Approval:
        """Record the pending approval of a new session's sandbox: no record but the approval
        itself, which keeps `grant` (the profile it would give, and what was asked) until the
        session it makes takes it. What is asked is `description` (`[new session] sandbox:
        write /srv/x`) in `cwd`. The cap is the one of `request`."""
        now = datetime.now(UTC)
        approval = Approval(
            id=approval_id,
            subject="session",
            command=description,
            cwd=cwd,
            reason=reason,
            requested_by=owner,
            kind="sandbox",
            sandbox_request=json.dumps(sandbox_request),
            session_grant=json.dumps(grant),
            created_at=now,
            expires_at=now + timedelta(seconds=self._timeout),
        )
        return await self._insert(None, approval)

    async def _insert(
        self, subject: Execution | FileOperation | None, approval: Approval
    ) -> Approval:
        inserted = await self._db.call(
            crud.insert_awaiting, record=subject, approval=approval, max_pending=self._max_pending
        )
        if inserted is None:
            raise PendingApprovalLimitError(
                self._max_pending,
                retry_after_seconds=await self._retry_after(approval.requested_by),
            )
        approval = inserted
        self._arm_expiry(approval)
        self._announce("approval.requested", approval)
        logger.info(
            "approval %s requested by %s for %s %s (%s): %s",
            approval.id,
            approval.requested_by,
            approval.subject,
            "(new)" if subject is None else subject.id,
            approval.reason,
            approval.command,
        )
        return approval

    async def _retry_after(self, owner: str) -> int:
        """Seconds until the owner's oldest pending approval expires (a decision may free a
        place sooner), within 1..60."""
        earliest = await self._db.call(crud.earliest_pending_expiry, requested_by=owner)
        if earliest is None:
            return 1
        seconds = (aware_utc(earliest) - datetime.now(UTC)).total_seconds()
        return max(1, min(60, math.ceil(seconds)))

    async def restore(self) -> int:
        """After a restart: pending approvals stay pending, with their expiry timers re-armed;
        a subject whose approval was decided just before the server stopped, but which was
        never settled (an execution never started or rejected, a file operation still
        awaiting), is settled now."""
        unsettled = set(get_args(ApprovalSubject)) - set(self._subjects)
        if unsettled:
            # A wiring fault: its decisions would be logged and dropped, so it never starts.
            raise RuntimeError(f"no handler settles the approvals of {sorted(unsettled)}")
        pending = await self._db.call(crud.pending_approvals)
        for approval in pending:
            self._arm_expiry(approval)
        for decided in await self._db.call(crud.decided_but_unsettled):
            logger.warning(
                "approval %s was %s before the restart; settling its %s now",
                decided.id,
                decided.state,
                decided.subject,
            )
            await self.settle_subject(decided)
        return len(pending)

    # --- decisions --------------------------------------------------------------------------

    async def decide(
        self,
        *,
        approval_id: str,
        approve: bool,
        principal: Principal,
        reason: str | None,
        remembered_rule: str | None = None,
    ) -> Approval:
        require_decider(principal)
        state = ApprovalState.approved if approve else ApprovalState.denied
        return await self._settle(
            approval_id,
            state,
            decided_by=principal.name,
            reason=reason,
            remembered_rule=remembered_rule,
        )

    async def expire(self, approval_id: str) -> Approval | None:
        try:
            return await self._settle(
                approval_id,
                ApprovalState.expired,
                decided_by="system",
                reason=f"no decision within {self._timeout:g} seconds",
            )
        except (ConflictError, NotFoundError):
            return None

    async def withdraw(self, approval_id: str, *, by: str, reason: str = WITHDRAWN_REASON) -> bool:
        """The subject is being cancelled while it waits: close its approval as `expired`,
        without its handler (the canceller settles the subject itself).

        False when the approval was already decided (an approver won the race), in which case
        the subject is being settled by the decision and the caller must treat it as such.
        """
        try:
            await self._settle(
                approval_id,
                ApprovalState.expired,
                decided_by=by,
                reason=reason,
                notify_subject=False,
            )
        except ConflictError:
            return False
        except NotFoundError:
            return True
        return True

    async def _settle(
        self,
        approval_id: str,
        state: ApprovalState,
        *,
        decided_by: str,
        reason: str | None,
        notify_subject: bool = True,
        remembered_rule: str | None = None,
    ) -> Approval:
        self._deciding[approval_id] += 1
        try:
            return await self._write_decision(
                approval_id,
                state,
                decided_by=decided_by,
                reason=reason,
                notify_subject=notify_subject,
                remembered_rule=remembered_rule,
            )
        finally:
            self._deciding[approval_id] -= 1
            if not self._deciding[approval_id]:
                del self._deciding[approval_id]

    async def _write_decision(
        self,
        approval_id: str,
        state: ApprovalState,
        *,
        decided_by: str,
        reason: str | None,
        notify_subject: bool,
        remembered_rule: str | None,
    ) -> Approval:
        # The conditional UPDATE (pending → decided) is the single arbiter between approvers,
        # the expiry timer and a cancel racing for the same approval.
        changed = await self._db.call(
            crud.decide_approval,
            approval_id=approval_id,
            state=state,
            decided_by=decided_by,
            decision_reason=reason,
            decided_at=datetime.now(UTC),
            remembered_rule=remembered_rule,
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
        decided_at = aware_utc(approval.decided_at or datetime.now(UTC))
        waited = (decided_at - aware_utc(approval.created_at)).total_seconds()
        if self._metrics is not None:
            self._metrics.approval_wait.labels(state.value).observe(max(0.0, waited))
        execution_event(
            "approval_decided",
            execution_id=approval.execution_id,
            owner=approval.requested_by,
            approval_id=approval_id,
            decision=state.value,
            decided_by=decided_by,
            reason=reason or "no reason given",
            waited_ms=round(waited * 1000),
        )
        self._announce("approval.decided", approval)
        if notify_subject:
            await self.settle_subject(approval)
        return approval

    async def settle_missed(self, approval: Approval) -> None:
        """The polling fallback's `settle_subject`: a decision this process is writing now is
        left to the request writing it (which settles it, or, should it fail before, leaves
        it to the next poll)."""
        if approval.id not in self._deciding:
            await self.settle_subject(approval)

    async def settle_subject(self, approval: Approval) -> None:
        """Hand a decided approval to the handler of its subject kind."""
        handler = self._subjects.get(approval.subject)
        if handler is None:
            logger.error("no handler settles approval %s of %s", approval.id, approval.subject)
            return
        await handler(approval)

    # --- other replicas' approvals (app/cluster/notify.py) -----------------------------------

    def _announce(self, kind: str, approval: Approval) -> None:
        self._remember(approval)
        self._publish(approval_event(kind, approval))
        for listener in self._announced:
            listener(kind, approval)

    def _remember(self, approval: Approval) -> None:
        self._published[approval.id] = approval.state
        self._published.move_to_end(approval.id)
        while len(self._published) > REMEMBERED_APPROVALS:
            self._published.popitem(last=False)

    async def relay(self, approval: Approval) -> None:
        """An approval another replica requested or decided: this replica's listeners hear of
        it once, its expiry is kept here too (any replica may expire it; the conditional
        UPDATE lets one win), and a decision settles the execution if it is this node's."""
        if self._published.get(approval.id) == approval.state or approval.id in self._deciding:
            return  # heard already, or this process's own decision on its way (`_settle`)
        self._remember(approval)
        if approval.state == ApprovalState.pending:
            if approval.id not in self._expiry:
                self._arm_expiry(approval)
            self._publish(approval_event("approval.requested", approval))
            return
        handle = self._expiry.pop(approval.id, None)
        if handle is not None:
            handle.cancel()
        self._publish(approval_event("approval.decided", approval))
        await self.settle_subject(approval)

    # --- reads ------------------------------------------------------------------------------

    async def get(self, approval_id: str, principal: Principal) -> Approval:
        approval = await self._db.call(crud.get_approval, approval_id=approval_id)
        if approval is None or not principal.may_read(approval.requested_by):
            raise NotFoundError(f"approval {approval_id} not found")
        return approval

    async def list(self, principal: Principal, *, state: str | None, limit: int) -> list[Approval]:
        requested_by = None if principal.reads_everything else principal.name
        return await self._db.call(
            crud.list_approvals, state=state, requested_by=requested_by, limit=limit
        )

    # --- listeners (WebSocket /v1/approvals/stream) -----------------------------------------

    def subscribe(self) -> asyncio.Queue[dict[str, Any]]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._listeners.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[dict[str, Any]]) -> None:
        self._listeners.discard(queue)

    def _publish(self, event: dict[str, Any]) -> None:
        for queue in list(self._listeners):
            if queue.qsize() >= LISTENER_QUEUE_SIZE:
                # A listener that stopped reading is dropped, never allowed to stall deciders
                # or grow without bound; `overflow` tells it to reconnect and list again.
                self._listeners.discard(queue)
                queue.put_nowait(OVERFLOW_EVENT)
            else:
                queue.put_nowait(event)

    # --- expiry -----------------------------------------------------------------------------

    def _arm_expiry(self, approval: Approval) -> None:
        loop = asyncio.get_running_loop()
        delay = max(0.0, (aware_utc(approval.expires_at) - datetime.now(UTC)).total_seconds())
        self._expiry[approval.id] = loop.call_later(delay, self._spawn_expire, approval.id)

    def _spawn_expire(self, approval_id: str) -> None:
        self._expiry.pop(approval_id, None)
        task = asyncio.create_task(self.expire(approval_id))
        self._tasks.add(task)
        task.add_done_callback(self._expiry_done)

    def _expiry_done(self, task: asyncio.Task[Approval | None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("expiring an approval failed", exc_info=task.exception())

    @property
    def pending_count(self) -> int:
        """Approvals of this server waiting for a decision (each has its expiry armed)."""
        return len(self._expiry)

    async def close(self) -> None:
        for handle in self._expiry.values():
            handle.cancel()
        self._expiry.clear()
        for task in list(self._tasks):
            task.cancel()
