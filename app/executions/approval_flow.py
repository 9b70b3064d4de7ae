"""A command the policy says to `prompt` for: record it as awaiting approval, hold its caller
while a human decides (or answer 202), then start or reject it when the decision comes, even
after a restart (the draft is stored with the record)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from app.approvals.service import (
    RETRY_WITHDRAWN_REASON,
    WITHDRAWN_REASON,
    ApprovalService,
    new_approval_id,
)
from app.core.auth import Principal
from app.core.errors import (
    AppError,
    ApprovalRejectedError,
    ConflictError,
    InterceptedError,
    InvalidRequestError,
    ShuttingDownError,
    StaleApprovalError,
)
from app.executions.answer import Answers, Outcome
from app.executions.completion import notify_columns
from app.executions.context import Context
from app.executions.draft import (
    Draft,
    new_execution_id,
    pending_request_json,
    read_pending_request,
)
from app.executions.launch import Launch, Launcher
from app.executions.lifecycle import Lifecycle
from app.executions.ports import CallerGone
from app.executions.registry import LiveExecution
from app.executions.result_text import CANCELLED_NOTICE
from app.executions.views import ExecutionReader
from app.output.artifact_log import artifact_log_path
from app.store import crud
from app.store.models import (
    Approval,
    ApprovalState,
    Execution,
    ExecutionMode,
    ExecutionState,
)

logger = logging.getLogger("shellgate.executions")

# A decision made while a cancel was withdrawing the approval starts (or rejects) the command
# within moments; how long the cancel waits to see which.
DECISION_SETTLE_SECONDS = 10.0
# Beyond the approval's own expiry: how long a streamed call follows its pending record.
STREAMED_DECISION_MARGIN_SECONDS = 30.0
# Who withdraws a call nobody can be answered for, and what its record says.
SERVER_NAME = "shellgate"
RETRY_WITHDRAWN_NOTICE = (
    "Withdrawn without running: the server stopped while this runner call awaited approval, "
    "and its caller was told to retry (a retry asks anew)."
)


class ApprovalFlow:
    def __init__(
        self,
        context: Context,
        launcher: Launcher,
        lifecycle: Lifecycle,
        answers: Answers,
        reader: ExecutionReader,
        approvals: ApprovalService,
    ) -> None:
        self._settings = context.settings
        self._db = context.db
        self._registry = context.registry
        self._changes = context.changes
        self._launcher = launcher
        self._lifecycle = lifecycle
        self._answers = answers
        self._reader = reader
        # The approvals of executions come back here through `settled`.
        self.approvals = approvals
        approvals.settles("execution", self.settled)
        self._tracing = context.tracing
        # Callers holding their request open for a decision; the result None means "it ended
        # without running (cancelled): answer with the record".
        self._waiters: dict[str, _Caller] = {}
        # Foreground runs whose caller left as they started (`_adopt_when_started`).
        self._adopted: set[asyncio.Task[None]] = set()
        # Executions being settled now: a decision heard twice (the approver's own call and
        # the polling fallback, or a notification) starts the command once, and the second
        # hearer waits for the first, so a decision's answer always comes after its effect.
        self._settling: dict[str, asyncio.Event] = {}
        # Executions a cancel is withdrawing the approval of (`cancel_awaiting`): the
        # withdrawal settles the approval (expired), and that settlement must leave the
        # execution and its caller to the cancel, not reject them.
        self._cancelling: set[str] = set()
        self._node = context.node

    # --- asking -------------------------------------------------------------------------------

    async def hold(
        self,
        owner: Principal,
        draft: Draft,
        reason: str,
        approval_wait: float,
        execution_id: str | None = None,
        caller_gone: CallerGone | None = None,
    ) -> Outcome:
        """Record the execution as awaiting approval; a foreground caller waits up to
        `approval_wait` seconds for the decision and then gets the run's answer.

        A caller that leaves first (`caller_gone` returns: its connection closed; or its task
        is cancelled) is no longer waiting from that moment: a decision after it starts the
        command as a job, under the cap (or fails it with the job-limit message at the cap),
        exactly as once `approval_wait` ran out."""
        execution_id = execution_id or new_execution_id()
        caller: _Caller | None = None
        if not draft.async_ and approval_wait > 0:
            # Registered before the approval exists, so that even an instant decision (an
            # automated approver on the stream) finds the caller still holding on.
            caller = _Caller(asyncio.get_running_loop().create_future())
            self._waiters[execution_id] = caller
        on_its_way = contextlib.ExitStack()
        try:
            await self._request(owner, draft, reason, execution_id)
            if caller is None:
                return Outcome(202, await self._reader.get(owner, execution_id))
            with self._tracing.span("approval_wait"):
                decided = await self._changes.wait_unless_stopping(
                    asyncio.shield(caller.answer),
                    approval_wait,
                    unless=None if caller_gone is None else caller.leaves(caller_gone),
                )
            # Out of time, the caller gone, or the server stopping: the approval stays pending
            # (it survives a restart) and the caller polls the execution. A decision that
            # arrived as we gave up took the waiter: `settled` always resolves the waiter it
            # took, so this ends.
            if not decided and self._waiters.pop(execution_id, None) is not None:
                return Outcome(202, await self._reader.get(owner, execution_id))
            if not caller.here:
                # The decision took the waiter, and the caller left while it started the
                # command: whatever it started is looked after without the caller.
                self._adopt_when_started(caller)
                return Outcome(202, await self._reader.get(owner, execution_id))
            launch = await caller.answer
            if launch is not None:
                # Counted for a stop's drain by this call itself from now, before the count
                # the decision kept while it started the command is let go (`settled`).
                on_its_way.enter_context(self._changes.awaiting_command_end())
        except asyncio.CancelledError:
            if caller is not None:
                caller.here = False
                if self._waiters.get(execution_id) is not caller:
                    self._adopt_when_started(caller)
            raise
        finally:
            if caller is not None:
                caller.release_count()
                if self._waiters.get(execution_id) is caller:
                    self._waiters.pop(execution_id, None)
        with on_its_way:
            if launch is None:
                return Outcome(200, await self._reader.get(owner, execution_id))
            return await self._answers.answer(launch)

    def _adopt_when_started(self, caller: _Caller) -> None:
        """The caller left after a decision took it. The decision read the caller's presence
        when it chose the mode, so the command is a job unless the caller left between that
        choice and now (the spawn): such a foreground run becomes a job at once, under the cap,
        or, at the cap, runs on to its end as a foreground call does whose caller is gone
        (followed here until then), rather than be killed half-way after its approval."""
        if caller.adopted:
            return  # a cancel while the caller's gone answer was being read: already done
        caller.adopted = True

        def started(answer: asyncio.Future[Launch | None]) -> None:
            if answer.cancelled() or answer.exception() is not None:
                return  # not started: recorded `rejected` or `failed` by `_start_or_reject`
            launch = answer.result()
            if launch is None or launch.foreground_wait == 0:
                return  # ended before it started, or a job already
            task = asyncio.create_task(self._adopt(launch))
            self._adopted.add(task)
            task.add_done_callback(self._adopted.discard)

        caller.answer.add_done_callback(started)

    async def _adopt(self, launch: Launch) -> None:
        logger.info("the caller of %s left as it started: backgrounding it", launch.live.id)
        try:
            await self._answers.answer(launch, caller_left=True)
        except Exception:
            logger.exception("could not background %s after its caller left", launch.live.id)

    async def follow_streamed(
        self,
        owner: Principal,
        draft: Draft,
        reason: str,
        execution_id: str | None = None,
        caller_gone: CallerGone | None = None,
    ) -> tuple[str, LiveExecution | None]:
        """A streamed call: not held as a request, it follows the record until the decision has
        started (or ended) the command; refusals raise what the runner's caller should see.

        The stream borrows its command: a caller that leaves first (`caller_gone`) withdraws
        it, as a cancel would (the runner's command never becomes a job)."""
        execution_id = execution_id or new_execution_id()
        await self._request(owner, draft, reason, execution_id)
        within = self._settings.approval_timeout + STREAMED_DECISION_MARGIN_SECONDS
        with self._tracing.span("approval_wait"):
            followed = asyncio.ensure_future(self._reader.wait_past_approval(execution_id, within))
            if caller_gone is not None:
                # Without a time of its own (the follow has one): it ends with the follow, the
                # server's stop, or the caller leaving, which is the one that leaves it running.
                await self._changes.wait_unless_stopping(
                    asyncio.shield(followed), None, unless=caller_gone()
                )
                if not followed.done() and not self._changes.stopping:
                    followed.cancel()
                    await self._withdraw_streamed(owner, execution_id)
            record = await followed
        state = ExecutionState(record.state)
        if state is ExecutionState.rejected and record.approval_id:
            approval = await self._db.call(crud.get_approval, approval_id=record.approval_id)
            if approval is not None and approval.state != ApprovalState.approved:
                raise rejection(approval)
        if state is ExecutionState.awaiting_approval:
            if self._changes.stopping:
                # The caller is told to retry, and a retry asks anew: approved after the
                # restart, this call would run for nobody (or twice, with the retry's).
                await self._withdraw_unanswerable(record, even_if_decided=False)
                raise ShuttingDownError()
            raise ApprovalRejectedError(
                "Approval still pending", details={"approval_id": record.approval_id}
            )
        if record.started_at is None:
            # Approved but never started (interceptor, cwd, cancel): the reason is its notice.
            notices = json.loads(record.notices)
            message = notices[-1] if notices else f"execution {execution_id} did not start"
            if state is ExecutionState.rejected:
                raise InterceptedError(message)
            if state is ExecutionState.cancelled:
                raise ConflictError(message)
            raise InvalidRequestError(message)
        return execution_id, self._registry.get(execution_id)

    async def withdraw_orphaned_streamed(self) -> int:
        """At start-up: runner calls of this replica left awaiting approval by a server that
        died (kill -9, a crash) had their stream cut with it, so nobody can be answered any
        more. Each is withdrawn, or, decided but not yet started, cancelled before the
        approvals' restore would start it. Returns how many."""
        awaiting = await self._db.call(
            crud.executions_in_state, state=ExecutionState.awaiting_approval
        )
        withdrawn = 0
        for record in awaiting:
            # Another replica's call may still have its caller connected there.
            if record.node not in (None, self._settings.node_id):
                continue
            try:
                _, draft = read_pending_request(record.pending_request)
            except (ValueError, KeyError):
                continue  # unreadable: it fails to start when decided (read_pending_request)
            if draft.streamed:
                # Nothing starts a decided one before the approvals' restore: safe to end.
                await self._withdraw_unanswerable(record, even_if_decided=True)
                withdrawn += 1
        return withdrawn

    async def _withdraw_unanswerable(self, record: Execution, *, even_if_decided: bool) -> None:
        """A runner call whose caller can no longer be answered never runs: its approval is
        withdrawn and the execution ends `cancelled` without a process, saying why. A decision
        that came first is left as it is; unless `even_if_decided`, its start is left to it."""
        withdrawn = record.approval_id is None or await self.approvals.withdraw(
            record.approval_id, by=SERVER_NAME, reason=RETRY_WITHDRAWN_REASON
        )
        if withdrawn or even_if_decided:
            await self._lifecycle.finish_without_process(
                record, ExecutionState.cancelled, notice=RETRY_WITHDRAWN_NOTICE
            )

    async def _withdraw_streamed(self, owner: Principal, execution_id: str) -> None:
        """The runner's caller left before the decision: cancel the execution; when a decision
        won that race and started it, the command goes with its caller as it would mid-run."""
        logger.info("runner client of %s went away awaiting approval: cancelling it", execution_id)
        record = await self._reader.record(execution_id)
        if ExecutionState(record.state) is ExecutionState.awaiting_approval:
            await self.cancel_awaiting(record, by=owner.name)
        live = self._registry.get(execution_id)
        if live is not None and not live.has_exited:
            self._registry.cancel(live)
        raise ConflictError(f"the caller of execution {execution_id} went away")

    async def _request(
        self, owner: Principal, draft: Draft, reason: str, execution_id: str
    ) -> None:
        cwd = self._launcher.approval_cwd(draft, owner)
        record = Execution(
            id=execution_id,
            owner=owner.name,
            command=draft.command,
            original_command=draft.original_command,
            cwd=cwd,
            state=ExecutionState.awaiting_approval.value,
            mode=(ExecutionMode.job if draft.async_ else ExecutionMode.foreground).value,
            pty=draft.pty,
            session_id=draft.session,
            artifact_path=str(artifact_log_path(self._settings.artifacts_dir, execution_id)),
            node=self._settings.node_id or None,
            approval_id=new_approval_id(),
            # The validated request, so that the approved command can start after a restart.
            pending_request=pending_request_json(owner.role, draft),
            created_at=datetime.now(UTC),
            policy_reason=reason,
            **notify_columns(draft.notify_url),
        )
        env = draft.shown_env if draft.shown_env is not None else draft.env
        await self.approvals.request(
            record,
            reason=reason,
            env=env,
            kind="sandbox" if draft.sandbox_request is not None else "command",
            sandbox_request=draft.sandbox_request,
            suggested_pattern=draft.suggested_pattern,
        )

    # --- the decision -------------------------------------------------------------------------

    async def settled(self, approval: Approval) -> None:
        """An approval left `pending`: start or reject its execution, and answer its caller."""
        if approval.execution_id is None:
            return
        if approval.state == ApprovalState.expired and approval.execution_id in self._cancelling:
            return  # withdrawn by a cancel, which ends the execution and answers its caller
        in_flight = self._settling.get(approval.execution_id)
        if in_flight is not None:
            await in_flight.wait()
            return
        done = self._settling[approval.execution_id] = asyncio.Event()
        waiter = self._waiters.pop(approval.execution_id, None)
        # A caller holds on for this decision: a stop's drain waits for what the decision
        # starts, as for any foreground call, from now until the caller counts itself (`hold`).
        counted = self._changes.command_wait() if waiter is not None and waiter.here else None
        launch: Launch | None = None
        failure: Exception | None = None
        try:
            # Whether the caller is still there is read when the mode is chosen, not now: one
            # who leaves while the approved command is being checked gets a job.
            launch = await self._start_or_reject(
                approval, caller_waiting=waiter.is_here if waiter is not None else _nobody_waiting
            )
        except Exception as error:
            failure = error
        finally:
            del self._settling[approval.execution_id]
            done.set()
            # A caller holding its request open always gets an answer, whatever happened.
            if waiter is not None and not waiter.answer.done():
                if counted is not None:
                    waiter.hand_count(counted)
                    counted = None
                if failure is not None:
                    waiter.answer.set_exception(failure)
                else:
                    waiter.answer.set_result(launch)
            if counted is not None:
                counted()

    async def _start_or_reject(
        self, approval: Approval, *, caller_waiting: Callable[[], bool]
    ) -> Launch | None:
        """Start the approved command, or reject it; raises what a waiting caller should get.

        After approval the command continues where the policy left it: the interceptor, which
        may still block it (→ `rejected`, 422 to the caller), then cwd, timeout and mode. With
        its caller gone it becomes a job, so at the job cap it fails with the job-limit message
        rather than exceed the cap.
        """
        execution_id = approval.execution_id
        if execution_id is None:
            return None
        record = await self._db.call(crud.get_execution, execution_id=execution_id)
        if record is None or ExecutionState(record.state) is not ExecutionState.awaiting_approval:
            return None
        if not await self._node.settles(record):
            return None  # another live replica holds it and settles it when it hears
        if approval.state != ApprovalState.approved:
            withdrawal_notice = _withdrawal_notice(approval)
            if withdrawal_notice is not None:
                # Withdrawn by a cancel that has not written its record yet: on another replica
                # (one serving the cancel of a dead replica's execution; this one's own cancels
                # are left alone, `_cancelling`), or one that died before writing it. The
                # execution ends as that cancel ends it, never `rejected`.
                await self._lifecycle.finish_without_process(
                    record, ExecutionState.cancelled, notice=withdrawal_notice
                )
                return None
            refused = rejection(approval)
            await self._lifecycle.finish_without_process(
                record, ExecutionState.rejected, notice=refused.message
            )
            raise refused
        try:
            owner_role, draft = read_pending_request(record.pending_request)
            return await self._launcher.launch(
                execution_id=execution_id,
                owner=Principal(record.owner, owner_role),
                draft=draft,
                caller_waiting=caller_waiting,
                existing=True,
            )
        except Exception as error:
            if isinstance(error, AppError):
                notice = error.message
            else:
                logger.exception("approved execution %s could not start", execution_id)
                notice = "The approved command could not start."
            state = (
                ExecutionState.rejected
                if isinstance(error, InterceptedError | StaleApprovalError)
                else ExecutionState.failed
            )
            await self._lifecycle.finish_without_process(record, state, notice=notice)
            raise

    # --- cancelling while it waits ------------------------------------------------------------

    async def cancel_awaiting(self, record: Execution, *, by: str) -> Execution | None:
        """Cancel an execution awaiting approval: None when it is now `cancelled`; otherwise a
        decision won the race and this is its record as that decision left it."""
        # Withdraw first: the approval's pending → expired update is what decides the race
        # with an approver, so a cancelled execution can never start afterwards. The
        # withdrawal's own settlement leaves the execution to this cancel (`settled`): heard
        # before the record below is written, it would reject it and answer the caller 403.
        self._cancelling.add(record.id)
        try:
            withdrawn = record.approval_id is None or await self.approvals.withdraw(
                record.approval_id, by=by
            )
            if not withdrawn:
                return await self._reader.wait_past_approval(record.id, DECISION_SETTLE_SECONDS)
            await self._lifecycle.finish_without_process(
                record, ExecutionState.cancelled, notice=CANCELLED_NOTICE
            )
        finally:
            self._cancelling.discard(record.id)
        waiter = self._waiters.pop(record.id, None)
        if waiter is not None and not waiter.answer.done():
            waiter.answer.set_result(None)
        return None


@dataclass(eq=False)
class _Caller:
    """A foreground caller holding its request open for the decision on its command."""

    answer: asyncio.Future[Launch | None]
    here: bool = True  # False from the moment it is known to have left
    adopted: bool = False  # what the decision starts is looked after without it
    # The drain's count of this call while its decision started the command (`settled`),
    # let go by the caller once it counts itself; `finished`: it no longer takes one.
    count: Callable[[], None] | None = None
    finished: bool = False

    def hand_count(self, release: Callable[[], None]) -> None:
        """Takes the decision's count of this call, or lets it go if the caller is done."""
        if self.finished:
            release()
        else:
            self.count = release

    def release_count(self) -> None:
        self.finished = True
        if self.count is not None:
            self.count()
            self.count = None

    def is_here(self) -> bool:
        return self.here

    async def leaves(self, gone: CallerGone) -> None:
        """Returns once the caller has gone, marked gone on that same turn of the loop."""
        await gone()
        self.here = False


def _nobody_waiting() -> bool:
    return False


def _withdrawal_notice(approval: Approval) -> str | None:
    """The notice of the `cancelled` record a withdrawal of `approval` ends its execution
    with (`cancel_awaiting`, `_withdraw_unanswerable`); None if it was not withdrawn."""
    if approval.state != ApprovalState.expired:
        return None
    return {
        WITHDRAWN_REASON: CANCELLED_NOTICE,
        RETRY_WITHDRAWN_REASON: RETRY_WITHDRAWN_NOTICE,
    }.get(approval.decision_reason or "")


def rejection(approval: Approval) -> ApprovalRejectedError:
    by = f" by {approval.decided_by}" if approval.decided_by not in (None, "system") else ""
    return ApprovalRejectedError(
        f"Approval {approval.state}{by}: {approval.decision_reason or 'no reason given'}",
        details={
            "approval_id": approval.id,
            "execution_id": approval.execution_id,
            "state": approval.state,
            "decided_by": approval.decided_by,
        },
    )
