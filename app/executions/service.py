"""The execution use-cases, as the routes, the MCP server and the session runner call them.
Each one reads as its phases; the phases live in the modules named after them:

    draft.py          checks and rewrites of a request (pure)
    (the policy)      `PolicyService.judge`: allow, prompt or deny, for the command and its env
    approval_flow.py  hold a `prompt`ed call for a human decision, then start or reject it
    launch.py         interceptor, cwd, timeout, mode; spawn and record
    answer.py         the caller's answer: the result, or 202 once auto-backgrounded
    lifecycle.py      exit, session bookkeeping, terminal record; the server's stop
    views.py          reads: record → wire, long-poll, list, output log
    control.py        keystrokes, resize, signals, cancel
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import replace

from app.approvals.service import ApprovalService
from app.confinement import Confinement
from app.core.auth import Principal
from app.core.config import Settings
from app.core.errors import ConflictError, NotFoundError, PolicyDeniedError
from app.executions import draft as drafts
from app.executions import sandboxing
from app.executions.answer import Answers, Outcome
from app.executions.approval_flow import ApprovalFlow
from app.executions.changes import StateChanges
from app.executions.completion import NO_DELIVERY, CompletionHooks
from app.executions.context import Context
from app.executions.control import Controls, require_control
from app.executions.launch import Launcher
from app.executions.lifecycle import Lifecycle
from app.executions.pending_record import IntentJournal
from app.executions.ports import (
    LOCAL_NODE,
    CallerGone,
    NodeRole,
    SessionBinding,
    SessionContext,
)
from app.executions.registry import LiveExecution, Registry
from app.executions.views import ExecutionReader, OutputPage, is_terminal
from app.governance.service import (
    Judgement,
    PolicyService,
    escalation_reason,
    suggested_pattern,
)
from app.observability.events import execution_event
from app.observability.metrics import Metrics
from app.observability.tracing import TRACING_OFF, Tracing
from app.output.artifact_log import ArtifactLog
from app.output.search import LogSearch
from app.policy.engine import RuleAction
from app.policy.env_rules import validate_env
from app.sandbox import Sandbox
from app.sandbox.profile import SandboxProfile
from app.schemas import ExecutionCreate, ExecutionPublic, SandboxRequest
from app.store.db import Database
from app.store.models import Execution, ExecutionState
from app.store.storage import StorageGuard

logger = logging.getLogger("shellgate.executions")


class ExecutionService:
    def __init__(
        self,
        settings: Settings,
        db: Database,
        registry: Registry,
        policy: PolicyService,
        metrics: Metrics,
        sessions: SessionBinding,
        confinement: Confinement,
        storage: StorageGuard,
        tracing: Tracing = TRACING_OFF,
        node: NodeRole = LOCAL_NODE,
        completion: CompletionHooks = NO_DELIVERY,
        sandbox: Sandbox | None = None,
        *,
        approvals: ApprovalService,
    ) -> None:
        """`sandbox`: the boundary the server checked at start; by default one built from
        `settings` (so a service built without one still sandboxes its commands).

        `approvals`: the server's (app/services.py); this service settles their executions."""
        self._settings = settings
        self._policy = policy
        self._metrics = metrics
        self._sessions = sessions
        self._confinement = confinement
        settings.artifacts_dir.mkdir(parents=True, exist_ok=True)
        self._tracing = tracing
        self._changes = StateChanges()
        metrics.watch_waiting_calls(lambda: self._changes.waiting)
        context = Context(
            settings,
            db,
            registry,
            metrics,
            self._changes,
            confinement,
            storage,
            tracing,
            node,
            completion,
            sandbox if sandbox is not None else Sandbox(settings),
        )
        self._completion = completion
        self._reader = ExecutionReader(context)
        self._lifecycle = Lifecycle(context, keeps_daemons=lambda: policy.document.keep_daemons)
        # What a session's calls left running under `keep_daemons` ends with the session.
        sessions.when_deleted(self._lifecycle.end_session)
        self._launcher = Launcher(context, policy, sessions, self._lifecycle)
        self._answers = Answers(context, self._reader)
        self._approval_flow = ApprovalFlow(
            context,
            self._launcher,
            self._lifecycle,
            self._answers,
            self._reader,
            approvals,
        )
        self._controls = Controls(context, self._reader)

    @property
    def approvals(self) -> ApprovalService:
        """The approvals this service asks for (their decisions come back to it)."""
        return self._approval_flow.approvals

    async def withdraw_orphaned_streamed(self) -> int:
        """At start-up, before the approvals' restore (ApprovalFlow.withdraw_orphaned_streamed)."""
        return await self._approval_flow.withdraw_orphaned_streamed()

    # --- running a command --------------------------------------------------------------------

    async def submit(
        self,
        principal: Principal,
        request: ExecutionCreate,
        *,
        caller_gone: CallerGone | None = None,
    ) -> Outcome:
        """`POST /v1/executions`: checks, policy, then run (or hold for approval) and answer.
        `caller_gone` returns once the caller has left (held for approval, it stops waiting
        then: the approved command becomes a job)."""
        # From its arrival, not only from its spawn on: a stop's drain waits for a call it
        # accepted before the signal, so a quick command caught by a rolling restart while it
        # was still being checked or spawned answers 200, not `lost` (docs/operations.md).
        on_its_way = self._changes.command_wait()
        try:
            return await self._checked_and_run(principal, request, caller_gone, on_its_way)
        finally:
            on_its_way()

    async def _checked_and_run(
        self,
        principal: Principal,
        request: ExecutionCreate,
        caller_gone: CallerGone | None,
        on_its_way: Callable[[], None],
    ) -> Outcome:
        """`submit`'s work; `on_its_way` lets go of the call's count for the drain."""
        session = await self._admit(principal, request.command, request.env, request.session)
        session_pty = session.pty if session is not None else None
        draft = drafts.draft_from_request(request, session_pty=session_pty)
        draft.notify_url = await self._completion.admit(principal.name, request.notify_url)
        # Above the server's limits → 422 before the policy (a session's own limits are merged
        # under these at launch).
        self._confinement.resolve(draft.limits)
        env = drafts.effective_env(session.env if session else None, draft.env)
        if session is not None and draft.env:
            validate_env(env)  # the session's and the call's together, within the sizes
        execution_id = self._submitted(principal, draft)
        cwd = self._launcher.approval_cwd(draft, principal)
        # The policy reads the command as sent, so a leading `cd` it still holds starts from
        # where that `cd` runs; what the rewrite left is judged where it will run.
        start, run = cwd, None
        if draft.command != draft.original_command:
            start = self._launcher.approval_cwd(replace(draft, cwd_request=None), principal)
            run = (draft.command, cwd)
        judgement = await self._judge(
            principal, request.command, execution_id, env=env, cwd=start, run=run
        )
        _note_judgement(draft, judgement, request.command)
        reason = judgement.reason
        if session is not None:
            sandboxing.for_session_call(
                self._policy, self._session_profile(session), request.sandbox
            )
        else:
            sandbox = sandboxing.for_execution(self._policy, judgement, request.sandbox)
            if sandbox.ask:
                sandbox = await self._remembered_escalation(
                    principal, request.command, start, draft, sandbox
                )
            draft.sandbox = sandbox.profile.to_record()
            draft.sandbox_request = sandbox.approval_request()
            if sandbox.ask:
                reason = sandbox.reason(judgement)
                # Offered to remember with the escalation, as for a prompt.
                draft.suggested_pattern = draft.suggested_pattern or suggested_pattern(
                    judgement.command, request.command
                )
        if judgement.approval == RuleAction.prompt or draft.sandbox_request is not None:
            draft.shown_cwd, draft.shown_env = cwd, env
            # Waiting for a person, not for a command: the stop answers it at once (202).
            on_its_way()
            return await self._approval_flow.hold(
                principal,
                draft,
                reason,
                request.approval_wait,
                execution_id,
                caller_gone=caller_gone,
            )
        launch = await self._launcher.launch(
            execution_id=execution_id,
            owner=principal,
            draft=draft,
            caller_waiting=True,
        )
        return await self._answers.answer(launch)

    async def _remembered_escalation(
        self,
        principal: Principal,
        command: str,
        cwd: str,
        draft: drafts.Draft,
        decision: sandboxing.SandboxDecision,
    ) -> sandboxing.SandboxDecision:
        """`decision` without its ask when one of the owner's remembered escalations vouches
        for the command and covers all it asks (the record then names that rule); otherwise
        `decision` unchanged, and a human decides."""
        rule = await self._policy.remembered_widening(command, owner=principal.name, cwd=cwd)
        if rule is None or rule.sandbox is None:
            return decision
        covered = sandboxing.covered_by_remembered(self._policy, decision, rule.sandbox)
        if covered is None:
            return decision
        draft.remembered_rule = rule.id
        draft.policy_reason = f"{draft.policy_reason}; {escalation_reason(rule, decision.ask)}"
        return covered

    async def start_streamed(
        self,
        principal: Principal,
        *,
        session_id: str,
        command: str,
        timeout_seconds: float,
        sandbox: SandboxRequest | None = None,
        caller_gone: CallerGone | None = None,
    ) -> tuple[str, LiveExecution | None]:
        """A streaming-runner call: `submit`'s checks and policy, then a foreground run in the
        session that never auto-backgrounds. Returns the execution id and its live execution
        (None when an approved command already finished: read the record)."""
        session = await self._admit(principal, command, None, session_id)
        assert session is not None  # a session id was given
        draft = drafts.runner_draft(
            command, session_id=session_id, timeout_seconds=timeout_seconds, pty=session.pty
        )
        execution_id = self._submitted(principal, draft)
        # The session's env is judged on every call under the policy in force now: a name the
        # policy came to deny after the session was made blocks its calls (fail closed).
        env = drafts.effective_env(session.env, None)
        judgement = await self._judge(principal, command, execution_id, env=env, cwd=session.cwd)
        _note_judgement(draft, judgement, command)
        sandboxing.for_session_call(self._policy, self._session_profile(session), sandbox)
        if judgement.approval == RuleAction.prompt:
            draft.shown_cwd, draft.shown_env = session.cwd, env
            return await self._approval_flow.follow_streamed(
                principal, draft, judgement.reason, execution_id, caller_gone=caller_gone
            )
        launch = await self._launcher.launch(
            execution_id=execution_id,
            owner=principal,
            draft=draft,
            caller_waiting=True,
        )
        return launch.live.id, launch.live

    def _session_profile(self, session: SessionContext) -> SandboxProfile:
        """The profile the session's calls run with, fixed at its creation."""
        if session.sandbox is None:
            return self._policy.sandbox_profile()
        return SandboxProfile.from_record(session.sandbox)

    async def _admit(
        self,
        principal: Principal,
        command: str,
        env: dict[str, str] | None,
        session_id: str | None,
    ) -> SessionContext | None:
        """Who may run, the request's own checks, and its session (an unknown or another
        owner's session is a 404 before the policy says anything)."""
        principal.require("agent", "admin")
        drafts.validate_command(command, max_bytes=self._settings.max_command_bytes)
        validate_env(env)
        if session_id is None:
            return None
        return await self._sessions.context(session_id, principal)

    def _submitted(self, principal: Principal, draft: drafts.Draft) -> str:
        """The new execution's id, named on the request's span and in the log."""
        execution_id = drafts.new_execution_id()
        self._tracing.tag_execution(execution_id)
        execution_event(
            "submitted",
            execution_id=execution_id,
            owner=principal.name,
            session=draft.session,
            pty=draft.pty,
            command_bytes=len(draft.original_command.encode("utf-8", "surrogatepass")),
        )
        return execution_id

    async def _judge(
        self,
        principal: Principal,
        command: str,
        execution_id: str,
        *,
        env: dict[str, str],
        cwd: str,
        run: tuple[str, str] | None = None,
    ) -> Judgement:
        """The policy's verdict on a command and every env name it runs with, the stricter of
        the two; a deny ends the call here (403) and nothing is stored."""
        with self._tracing.span("policy"):
            judgement = await self._policy.judge(
                command, env=env, cwd=cwd, run=run, owner=principal.name
            )
        self._metrics.labelled(self._metrics.policy_verdicts, judgement.approval.value).inc()
        execution_event(
            "verdict",
            execution_id=execution_id,
            owner=principal.name,
            verdict=judgement.approval.value,
            reason=judgement.reason,
        )
        if judgement.approval == RuleAction.deny:
            # Denied calls leave no record: this line is what an audit has of them.
            logger.info("denied for %s: %s (%s)", principal.name, command, judgement.reason)
            if judgement.denied_by_env:
                denied = [item.name for item in judgement.env.named("deny")]
                raise PolicyDeniedError(judgement.reason, details={"env": denied})
            rule = judgement.command.matched_rule
            raise PolicyDeniedError(
                judgement.reason, details={"rule": rule.match if rule else None}
            )
        return judgement

    # --- reading ------------------------------------------------------------------------------

    async def get(
        self, principal: Principal, execution_id: str, wait: float = 0
    ) -> ExecutionPublic:
        """The record; with `wait`, long-polls up to that many seconds for a terminal state."""
        return await self._reader.get(principal, execution_id, wait)

    async def until_ended_elsewhere(self, execution_id: str, within: float) -> None:
        """Returns once another replica's execution has its terminal record (or no record any
        more), after `within` seconds, or once this server starts stopping: its record is
        followed in the database, as a long-poll of it is."""
        with contextlib.suppress(NotFoundError):
            await self._reader.wait_for_terminal(execution_id, within, elsewhere=True)

    async def list_page(
        self, principal: Principal, *, states: list[str] | None, limit: int, cursor: str | None
    ) -> tuple[list[ExecutionPublic], str | None]:
        return await self._reader.list_page(principal, states=states, limit=limit, cursor=cursor)

    async def read_output(
        self, principal: Principal, execution_id: str, offset: int, limit: int
    ) -> OutputPage:
        return await self._reader.read_output(principal, execution_id, offset, limit)

    async def search_output(
        self, principal: Principal, execution_id: str, query: str, limit: int, ignore_case: bool
    ) -> tuple[LogSearch, int, bool]:
        """The lines of the whole log holding `query`; the log's size; whether it is complete."""
        return await self._reader.search_output(principal, execution_id, query, limit, ignore_case)

    async def authorize_read(self, principal: Principal, execution_id: str) -> Execution:
        """The record, if this principal may read it (else NotFoundError)."""
        return await self._reader.readable(principal, execution_id)

    def live_for(self, principal: Principal, execution_id: str) -> LiveExecution | None:
        return self._reader.live_for(principal, execution_id)

    async def wait_for_state_change(
        self, principal: Principal, execution_id: str, seen: str | None, within: float
    ) -> Execution:
        """The record once its state is no longer `seen` (None: at once), or as it is after
        `within` seconds or once the server starts stopping (the SSE feed)."""
        await self._reader.readable(principal, execution_id)
        return await self._changes.wait_until(
            execution_id,
            lambda: self._reader.record(execution_id),
            lambda record: record.state != seen,
            within,
        )

    async def wait_past_approval(
        self, principal: Principal, execution_id: str, within: float
    ) -> Execution:
        """The record once it no longer awaits approval, or as it is after `within` seconds."""
        await self._reader.readable(principal, execution_id)
        return await self._reader.wait_past_approval(execution_id, within)

    async def open_finished_log(self, execution_id: str) -> ArtifactLog | None:
        """The output log of an execution that is no longer live (None: it never ran)."""
        return await self._reader.open_finished_log(execution_id)

    # --- driving ------------------------------------------------------------------------------

    async def cancel(self, principal: Principal, execution_id: str) -> ExecutionPublic:
        record = await self._reader.readable(principal, execution_id)
        require_control(principal, record, "cancel")
        if is_terminal(record):
            raise ConflictError(f"execution {execution_id} is already {record.state}")
        if record.state == ExecutionState.awaiting_approval:
            decided = await self._approval_flow.cancel_awaiting(record, by=principal.name)
            if decided is None:
                return await self.get(principal, execution_id)
            if is_terminal(decided):
                raise ConflictError(f"execution {execution_id} is already {decided.state}")
        await self._controls.cancel_running(execution_id)
        return await self.get(principal, execution_id)

    async def send_input(self, principal: Principal, execution_id: str, data: bytes) -> None:
        await self._controls.send_input(principal, execution_id, data)

    async def resize(self, principal: Principal, execution_id: str, rows: int, cols: int) -> None:
        await self._controls.resize(principal, execution_id, rows, cols)

    async def send_signal(self, principal: Principal, execution_id: str, sig: int) -> None:
        await self._controls.send_signal(principal, execution_id, sig)

    # --- the server's life --------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        """The stop was requested: new work is refused (its drain included)."""
        return self._changes.refusing

    async def until_stopping(self) -> None:
        """Returns once the server starts stopping (a stream then closes with 1012)."""
        await self._changes.until_stopping()

    def begin_stop(self, drain: float) -> None:
        """SIGTERM/SIGINT: refuse new work now; once the foreground calls whose command ends
        within `drain` seconds have answered, answer every waiting caller and stop every
        running command."""
        self._lifecycle.begin_stop(drain)

    def fence(self, notice: str) -> int:
        """End every running command: this replica lost its lease (Cluster.fence_if_due)."""
        return self._lifecycle.fence(notice)

    async def shutdown(self, within: float | None = None) -> None:
        """Stopping the server ends its commands: their groups are killed and they read `lost`.
        Waits up to `within` seconds (default: the shutdown grace) for their records."""
        await self._lifecycle.shutdown(within)
        self.intents.close()  # a record written later still reaches it (it reopens)

    @property
    def intents(self) -> IntentJournal:
        """The rows of quick foreground calls not in the database yet (pending_record.py)."""
        return self._launcher.intents


def _note_judgement(draft: drafts.Draft, judgement: Judgement, command: str) -> None:
    """What the record keeps of the policy's word: its reason, the remembered rule that allowed
    the call, and for a prompt the pattern the approver is offered to remember."""
    draft.policy_reason = judgement.reason
    draft.remembered_rule = judgement.command.remembered_rule
    if judgement.approval == RuleAction.prompt:
        draft.suggested_pattern = suggested_pattern(judgement.command, command)
