"""Use-cases for executions: submit, read, wait, cancel, input; the glue between the policy,
the approvals, the live registry and the database (SPEC §2-§4)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import secrets
import shlex
import signal
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import anyio.to_thread

from app import crud
from app.approvals import ApprovalService, new_approval_id
from app.artifact_log import ArtifactLog
from app.auth import Principal
from app.config import Settings
from app.db import Database
from app.environment import build_environment
from app.errors import (
    AppError,
    ApprovalRejectedError,
    ConflictError,
    ForbiddenError,
    InterceptedError,
    InvalidRequestError,
    JobLimitReachedError,
    NotFoundError,
    PolicyDeniedError,
)
from app.metrics import Metrics
from app.models import Approval, ApprovalState, Execution, ExecutionMode, ExecutionState
from app.output import OutputSink, truncation_footer
from app.policy import Approval as PolicyApproval
from app.policy import Verdict
from app.policy_service import PolicyService
from app.process import (
    RunningProcess,
    SpawnSpec,
    boot_id,
)
from app.registry import LiveExecution, Registry
from app.result_text import (
    CANCELLED_NOTICE,
    LOST_NOTICE,
    backgrounded_text,
    final_text,
    timeout_notice,
)
from app.schemas import ApprovalSummary, ExecutionCreate, ExecutionPublic
from app.shell_syntax import extract_leading_cd
from app.timeouts import ResolvedTimeout, resolve_timeout

logger = logging.getLogger("shellgate.executions")

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ARTIFACT_URL = re.compile(r"artifact://(ex_[A-Za-z0-9_-]{8,64})")
PTY_ROWS = (5, 200)
PTY_COLS = (20, 400)
RUNNER_PTY_SIZE = (24, 80)  # the reference runner's terminal


def new_execution_id() -> str:
    return "ex_" + secrets.token_urlsafe(15)


def clamp(value: int, bounds: tuple[int, int]) -> int:
    return max(bounds[0], min(bounds[1], value))


@dataclass
class Draft:
    """A request that passed validation, the `cd` rewrite and the policy; JSON-serialisable so
    that it survives a restart while its approval is pending."""

    original_command: str
    command: str
    cwd_request: str | None
    env: dict[str, str] | None
    timeout: float
    pty: bool
    async_: bool
    session: str | None
    tools: list[str] | None
    rows: int
    cols: int
    # A streaming-runner call (`POST /v1/sessions/{id}/run`): `timeout` is not clamped to the
    # executions' 1..3600 s range and the call never auto-backgrounds while its caller streams.
    streamed: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Draft:
        return cls(**json.loads(text))


@dataclass
class Outcome:
    """What a submit answers: the HTTP status (200 done, 202 job or pending) and the record."""

    status_code: int
    execution: ExecutionPublic


@dataclass(frozen=True)
class OutputPage:
    data: bytes
    total_bytes: int
    complete: bool
    next_offset: int


@dataclass
class Launch:
    live: LiveExecution
    foreground_wait: float | None  # seconds before auto-background; None = wait to the end
    notices: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SessionContext:
    """What an execution needs from the session it runs in (`app/sessions.py` provides it)."""

    id: str
    cwd: str
    env: dict[str, str]
    pty: bool


class SessionCall(Protocol):
    """One execution inside a session: what to spawn instead of `bash -c <command>`, and the
    session's bookkeeping around the process's life."""

    argv: list[str]
    env: dict[str, str]

    def started(self, live: LiveExecution) -> None: ...

    async def settle(self, live: LiveExecution) -> None:
        """After the process exited, before the terminal record is written."""

    def abandon(self) -> None:
        """The process never ran (or was killed before anyone could see it)."""


class SessionBinding(Protocol):
    async def context(self, session_id: str, principal: Principal) -> SessionContext:
        """The session if this principal may use it, else NotFoundError."""

    def known_cwd(self, session_id: str, principal: Principal) -> str:
        """The cwd of a session `context` has already loaded (no I/O), else NotFoundError."""

    def begin_call(
        self,
        context: SessionContext,
        *,
        execution_id: str,
        command: str,
        caller_env: dict[str, str] | None,
        pty: bool,
        may_save_state: bool,
    ) -> SessionCall: ...


class ExecutionService:
    def __init__(
        self,
        settings: Settings,
        db: Database,
        registry: Registry,
        policy: PolicyService,
        approvals: ApprovalService,
        metrics: Metrics,
    ) -> None:
        self.settings = settings
        self.db = db
        self.registry = registry
        self.policy = policy
        self.approvals = approvals
        self.metrics = metrics
        # Callers holding their request open for a decision; the result None means "it ended
        # without running (cancelled): answer with the record".
        self._approval_waiters: dict[str, asyncio.Future[Launch | None]] = {}
        self._state_changed: dict[str, asyncio.Event] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._boot_id = boot_id()
        # Set by Services.build once the session service exists (it depends on this one).
        self.session_binding: SessionBinding | None = None
        approvals.on_settled = self._on_approval_settled
        settings.artifacts_dir.mkdir(parents=True, exist_ok=True)

    # ---------------------------------------------------------------------------------------
    # submit
    # ---------------------------------------------------------------------------------------

    async def submit(self, principal: Principal, request: ExecutionCreate) -> Outcome:
        principal.require("agent", "admin")
        self._validate_command(request.command)
        self._validate_env(request.env)
        draft = self._rewrite_leading_cd(request)
        if request.session is not None:
            # An unknown (or another owner's) session is a 404 before the policy says anything.
            session = await self._session_context(request.session, principal)
            if "pty" not in request.model_fields_set:
                draft.pty = session.pty
        verdict = await self._judge(principal, request.command)
        if verdict.approval == PolicyApproval.prompt:
            return await self._hold_for_approval(principal, draft, verdict.reason, request)
        launch = await self._launch(
            execution_id=new_execution_id(), owner=principal, draft=draft, caller_waiting=True
        )
        return await self._answer_foreground(launch)

    async def start_streamed(
        self, principal: Principal, *, session_id: str, command: str, timeout_seconds: float
    ) -> tuple[str, LiveExecution | None]:
        """A streaming-runner call (SPEC §6): the policy and approvals of `submit`, then a
        foreground run in the session that never auto-backgrounds. Returns the execution id and
        its live execution (None when an approved command already finished: read the record).
        """
        principal.require("agent", "admin")
        self._validate_command(command)
        session = await self._session_context(session_id, principal)
        draft = Draft(
            original_command=command,
            command=command,
            cwd_request=None,
            env=None,
            timeout=timeout_seconds,
            pty=session.pty,
            async_=False,
            session=session_id,
            tools=None,
            rows=RUNNER_PTY_SIZE[0],
            cols=RUNNER_PTY_SIZE[1],
            streamed=True,
        )
        verdict = await self._judge(principal, command)
        if verdict.approval == PolicyApproval.prompt:
            return await self._await_streamed_approval(principal, draft, verdict.reason)
        launch = await self._launch(
            execution_id=new_execution_id(), owner=principal, draft=draft, caller_waiting=True
        )
        return launch.live.id, launch.live

    async def _await_streamed_approval(
        self, principal: Principal, draft: Draft, reason: str
    ) -> tuple[str, LiveExecution | None]:
        # The approval machinery of `submit`, asked not to hold the request itself: the stream
        # follows the record until the decision has started (or ended) the command.
        pending = await self._hold_for_approval(
            principal, draft, reason, ExecutionCreate(command=draft.command, approval_wait=0)
        )
        execution_id = pending.execution.id
        record = await self._await_decision_outcome(
            execution_id, within=self.settings.approval_timeout + 30
        )
        state = ExecutionState(record.state)
        if state is ExecutionState.rejected and record.approval_id:
            approval = await self.db.call(crud.get_approval, approval_id=record.approval_id)
            if approval is not None and approval.state != ApprovalState.approved:
                raise _rejection(approval)
        if state is ExecutionState.awaiting_approval:
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
        return execution_id, self.registry.get(execution_id)

    async def _judge(self, principal: Principal, command: str) -> Verdict:
        """The policy's verdict on a command; a deny ends the call here (403)."""
        verdict = await self.policy.evaluate(command)
        self.metrics.policy_verdicts.labels(verdict.approval.value).inc()
        if verdict.approval == PolicyApproval.deny:
            logger.info("denied for %s: %s (%s)", principal.name, command, verdict.reason)
            raise PolicyDeniedError(
                verdict.reason,
                details={"rule": verdict.matched_rule.match if verdict.matched_rule else None},
            )
        return verdict

    def _validate_command(self, command: str) -> None:
        size = len(command.encode("utf-8", "surrogatepass"))
        if size == 0:
            raise InvalidRequestError("command must not be empty")
        if size > self.settings.max_command_bytes:
            raise InvalidRequestError(
                f"command is {size} bytes; the limit is {self.settings.max_command_bytes} bytes"
            )
        if "\0" in command:
            raise InvalidRequestError("command must not contain a NUL byte")

    def validate_env(self, env: dict[str, str] | None) -> None:
        """The `env` rules of SPEC §2 (sessions configure an env too)."""
        self._validate_env(env)

    def resolve_cwd(self, cwd_request: str | None, base: str) -> str:
        """The validated working directory with SPEC §2's messages (does a stat: call it from
        a thread)."""
        return self._resolve_cwd(cwd_request, base)

    @staticmethod
    def _validate_env(env: dict[str, str] | None) -> None:
        for key, value in (env or {}).items():
            if not ENV_NAME.match(key):
                raise InvalidRequestError(f"Invalid bash env name: {key}")
            if "\0" in value:
                raise InvalidRequestError(f"env value of {key} must not contain a NUL byte")

    @staticmethod
    def _rewrite_leading_cd(request: ExecutionCreate) -> Draft:
        command, cwd_request = request.command, request.cwd or None
        if cwd_request is None:
            leading = extract_leading_cd(command)
            if leading is not None:
                cwd_request, command = leading.target, leading.rest
        return Draft(
            original_command=request.command,
            command=command,
            cwd_request=cwd_request,
            env=request.env or None,
            timeout=request.timeout,
            pty=request.pty,
            async_=request.async_,
            session=request.session,
            tools=request.tools,
            rows=clamp(request.rows, PTY_ROWS),
            cols=clamp(request.cols, PTY_COLS),
        )

    # --- the part after the policy: interceptor, expansion, cwd, timeout, mode, spawn --------

    async def _launch(
        self,
        *,
        execution_id: str,
        owner: Principal,
        draft: Draft,
        caller_waiting: bool,
        existing: bool = False,
    ) -> Launch:
        self._intercept(draft)
        command, env, cwd_request = await self._expand_artifacts(owner, draft)
        session = None
        if draft.session is not None:
            session = await self._session_context(draft.session, owner)
        cwd = self._resolve_cwd(
            cwd_request, session.cwd if session is not None else str(self.settings.workspace)
        )
        timeout = self._resolve_draft_timeout(draft)

        mode, foreground_wait = self._choose_mode(draft, timeout, caller_waiting)
        live = self._new_live(execution_id, owner.name)
        live.mode = mode
        live.notices = list(timeout.notices)
        # _choose_mode checked the cap on this same loop turn; reserving cannot fail here.
        if mode is ExecutionMode.job and not self.registry.reserve_job_slot(live):
            raise JobLimitReachedError(self.registry.max_jobs)
        argv = [self.settings.shell, "-c", command]
        process_env = build_environment(execution_id=execution_id, caller_env=env, pty=draft.pty)
        session_call: SessionCall | None = None
        if session is not None and self.session_binding is not None:
            # The session spawns its own wrapper around the command (state restore and save);
            # the record, the policy and the interceptor only ever see the user's command.
            session_call = self.session_binding.begin_call(
                session,
                execution_id=execution_id,
                command=command,
                caller_env=env,
                pty=draft.pty,
                may_save_state=mode is ExecutionMode.foreground,
            )
            argv, process_env = session_call.argv, session_call.env
        spec = SpawnSpec(
            argv=argv,
            cwd=cwd,
            env=process_env,
            pty=draft.pty,
            rows=draft.rows,
            cols=draft.cols,
        )
        now = datetime.now(UTC)
        try:
            process = await anyio.to_thread.run_sync(
                lambda: RunningProcess(spec, live.accept_output, live.accept_exit)
            )
        except OSError as error:
            self.registry.release_job_slot(live)
            live.log.finish()
            if session_call is not None:
                session_call.abandon()
            raise InvalidRequestError(f"could not start the command: {error.strerror}") from error
        live.process = process
        self.registry.add(live)
        if session_call is not None:
            session_call.started(live)
        values: dict[str, Any] = {
            "command": command,
            "cwd": cwd,
            "state": ExecutionState.running.value,
            "mode": mode.value,
            "pty": draft.pty,
            "session_id": draft.session,
            "pid": process.pid,
            "pgid": process.pgid,
            "proc_start_ticks": process.start_ticks,
            "boot_id": self._boot_id,
            "timeout_seconds": timeout.seconds,
            "requested_timeout_seconds": timeout.requested if timeout.clamped else None,
            "timeout_disabled": timeout.disabled,
            "notices": json.dumps(timeout.notices),
            "artifact_path": str(live.log.path),
            "started_at": now,
            "pending_request": None,
        }
        try:
            if existing:
                await self.db.call(crud.update_execution, execution_id=execution_id, values=values)
            else:
                record = Execution(
                    id=execution_id,
                    owner=owner.name,
                    original_command=draft.original_command,
                    created_at=now,
                    **values,
                )
                live.record = await self.db.call(crud.insert_execution, execution=record)
        except Exception:
            # Without a record nobody could ever see or cancel it: do not let it run.
            process.kill_group_on_exit()
            process.signal(signal.SIGKILL)
            self.registry.release_job_slot(live)
            self.registry.remove(execution_id)
            if session_call is not None:
                session_call.abandon()
            raise
        self._arm_deadline(live, timeout)
        self._track(self._supervise(live, timeout, session_call))
        self._notify_state(execution_id)
        self.metrics.executions_started.labels(mode.value).inc()
        logger.info(
            "started %s for %s (%s, pid %s): %s",
            execution_id,
            owner.name,
            mode,
            process.pid,
            command,
        )
        return Launch(live=live, foreground_wait=foreground_wait, notices=timeout.notices)

    def _resolve_draft_timeout(self, draft: Draft) -> ResolvedTimeout:
        if draft.streamed:
            # The runner's deadline is the session's timeout_ms (or the call's raised one) as
            # given: the 1..3600 s clamp belongs to executions; the server ceiling still holds.
            ceiling = self.settings.max_timeout
            seconds = min(draft.timeout, ceiling) if ceiling > 0 else draft.timeout
            return ResolvedTimeout(seconds=seconds, requested=draft.timeout)
        return resolve_timeout(draft.timeout, global_max=self.settings.max_timeout)

    def _intercept(self, draft: Draft) -> None:
        hit = self.policy.intercept(draft.original_command, draft.tools, rewritten=draft.command)
        if hit is not None:
            self.metrics.interceptions.inc()
            raise InterceptedError(hit.message, details={"tool": hit.tool})

    async def _expand_artifacts(
        self, owner: Principal, draft: Draft
    ) -> tuple[str, dict[str, str] | None, str | None]:
        texts = [draft.command, draft.cwd_request or "", *(draft.env or {}).values()]
        ids = {match for text in texts for match in ARTIFACT_URL.findall(text)}
        paths: dict[str, str] = {}
        for artifact_id in ids:
            record = await self.db.call(crud.get_execution, execution_id=artifact_id)
            if record is None:
                raise NotFoundError(f"artifact://{artifact_id} not found")
            if record.owner != owner.name and not owner.is_admin:
                raise ForbiddenError(f"artifact://{artifact_id} belongs to another owner")
            paths[artifact_id] = record.artifact_path

        def expand(text: str, quote: bool) -> str:
            def replace(match: re.Match[str]) -> str:
                path = paths[match.group(1)]
                return shlex.quote(path) if quote else path

            return ARTIFACT_URL.sub(replace, text)

        if not paths:
            return draft.command, draft.env, draft.cwd_request
        env = {key: expand(value, False) for key, value in draft.env.items()} if draft.env else None
        cwd = expand(draft.cwd_request, False) if draft.cwd_request else None
        return expand(draft.command, True), env, cwd

    def _session_base(self, session: str | None, owner: Principal) -> str:
        if session is None:
            return str(self.settings.workspace)
        if self.session_binding is None:
            raise NotFoundError(f"session {session} not found")
        return self.session_binding.known_cwd(session, owner)

    async def _session_context(self, session: str, principal: Principal) -> SessionContext:
        if self.session_binding is None:
            raise NotFoundError(f"session {session} not found")
        return await self.session_binding.context(session, principal)

    @staticmethod
    def _resolve_cwd(cwd_request: str | None, base: str) -> str:
        if not cwd_request:
            path = Path(base)
        else:
            text = cwd_request.replace("\u00a0", " ").replace("\u202f", " ")
            path = Path(os.path.expanduser(text))
            if not path.is_absolute():
                path = Path(base) / path
        resolved = os.path.normpath(str(path))
        try:
            is_dir = os.path.isdir(resolved)
            exists = is_dir or os.path.exists(resolved)
        except (OSError, ValueError):
            exists = is_dir = False
        if not exists:
            raise InvalidRequestError(f"Working directory does not exist: {resolved}")
        if not is_dir:
            raise InvalidRequestError(f"Working directory is not a directory: {resolved}")
        return resolved

    def _choose_mode(
        self, draft: Draft, timeout: ResolvedTimeout, caller_waiting: bool
    ) -> tuple[ExecutionMode, float | None]:
        if draft.streamed:
            # The runner's caller reads the stream to the end: a 202 would break its protocol.
            # Approved after its caller left, it still runs in the foreground, to its deadline.
            return ExecutionMode.foreground, None
        if draft.async_ or not caller_waiting:
            if self.registry.at_capacity:
                raise JobLimitReachedError(self.registry.max_jobs)
            return ExecutionMode.job, 0.0
        threshold = self.settings.auto_background_ms / 1000
        if threshold <= 0 or draft.pty or self.registry.at_capacity:
            # At the cap auto-background is skipped silently (reference §2.1).
            return ExecutionMode.foreground, None
        if timeout.seconds is None:
            wait = threshold
        else:
            wait = max(0.0, min(threshold, timeout.seconds - 1))
        if wait == 0:
            return ExecutionMode.job, 0.0
        return ExecutionMode.foreground, wait

    def _new_live(self, execution_id: str, owner: str) -> LiveExecution:
        log = ArtifactLog.create(
            self.settings.artifacts_dir, execution_id, max_bytes=self.settings.artifact_max_bytes
        )
        return LiveExecution(
            execution_id,
            owner=owner,
            log=log,
            sink=OutputSink(),
            loop=asyncio.get_running_loop(),
        )

    # --- deadlines, cancel, termination ------------------------------------------------------

    def _arm_deadline(self, live: LiveExecution, timeout: ResolvedTimeout) -> None:
        if timeout.seconds is None:
            return
        loop = asyncio.get_running_loop()
        handle = loop.call_later(timeout.seconds, self._on_deadline, live)
        live.exited.add_done_callback(lambda _: handle.cancel())

    def _on_deadline(self, live: LiveExecution) -> None:
        if live.has_exited or live.cancelled:
            return
        live.timed_out = True
        self.terminate(live)

    def terminate(self, live: LiveExecution, grace: float | None = None) -> None:
        """SIGTERM the whole group, then SIGKILL after the grace period if it still runs."""
        process = live.process
        if process is None or live.has_exited:
            return
        process.kill_group_on_exit()
        with contextlib.suppress(ValueError):
            process.signal(signal.SIGTERM)
        delay = self.settings.kill_grace_seconds if grace is None else grace
        loop = asyncio.get_running_loop()

        def escalate() -> None:
            if not live.has_exited:
                with contextlib.suppress(ValueError):
                    process.signal(signal.SIGKILL)

        handle = loop.call_later(delay, escalate)
        live.exited.add_done_callback(lambda _: handle.cancel())

    async def cancel(self, principal: Principal, execution_id: str) -> ExecutionPublic:
        record = await self._readable(principal, execution_id)
        if record.owner != principal.name and not principal.is_admin:
            raise ForbiddenError("only the owner or an admin can cancel this execution")
        state = ExecutionState(record.state)
        if state.is_terminal:
            raise ConflictError(f"execution {execution_id} is already {state.value}")
        if state is ExecutionState.awaiting_approval:
            # Withdraw first: the approval's pending → expired update is what decides the race
            # with an approver, so a cancelled execution can never start afterwards.
            withdrawn = record.approval_id is None or await self.approvals.withdraw(
                record.approval_id, by=principal.name
            )
            if withdrawn:
                await self._finish_without_process(
                    record, ExecutionState.cancelled, notice=CANCELLED_NOTICE
                )
                waiter = self._approval_waiters.pop(execution_id, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(None)
                return await self.get(principal, execution_id)
            # Decided just before: cancel whatever the decision made of it.
            record = await self._await_decision_outcome(execution_id)
            if ExecutionState(record.state).is_terminal:
                raise ConflictError(f"execution {execution_id} is already {record.state}")
        live = self.registry.get(execution_id)
        if live is not None:
            live.cancelled = True
            self.terminate(live)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(live.finished.wait(), self.settings.kill_grace_seconds + 5)
        return await self.get(principal, execution_id)

    # --- completion ---------------------------------------------------------------------------

    async def _supervise(
        self,
        live: LiveExecution,
        limit: ResolvedTimeout,
        session_call: SessionCall | None = None,
    ) -> None:
        status = await live.exited
        if session_call is not None:
            # Before the record turns terminal: whoever sees the end and calls again in the
            # session must find the state this call saved.
            try:
                await session_call.settle(live)
            except Exception:
                logger.exception("session bookkeeping failed after %s", live.id)
        if live.lost:
            state = ExecutionState.lost
            notice: str | None = None
        elif live.timed_out:
            state, notice = ExecutionState.timed_out, timeout_notice(limit.seconds)
        elif live.cancelled:
            state, notice = ExecutionState.cancelled, CANCELLED_NOTICE
        elif status.exit_code == 0:
            state, notice = ExecutionState.completed, None
        else:
            state, notice = ExecutionState.failed, None
        summary = live.summary(notice)
        values: dict[str, Any] = {
            "state": state.value,
            "exit_code": None if notice or live.lost else status.exit_code,
            "signal": status.signal,
            "timed_out": live.timed_out,
            **summary.record_fields(),
            "wall_time_ms": live.wall_time_ms,
            "finished_at": datetime.now(UTC),
        }
        notices = [*live.notices, LOST_NOTICE] if live.lost else live.notices
        values["notices"] = json.dumps(notices)
        values["text"] = final_text(
            body=summary.output,
            wall_time_ms=live.wall_time_ms,
            notices=notices,
            state=state,
            exit_code=values["exit_code"],
            footer=truncation_footer(summary, live.id),
        )
        try:
            if await self._write_final(live.id, values) and live.record is not None:
                # The waiting caller answers from this copy: one database read fewer per call.
                for key, value in values.items():
                    setattr(live.record, key, value)
            else:
                live.record = None
        finally:
            self.registry.release_job_slot(live)
            self.registry.remove(live.id)
            live.finished.set()
            self._notify_state(live.id)
            self.metrics.executions_finished.labels(state.value).inc()

    async def _write_final(self, execution_id: str, values: dict[str, Any]) -> bool:
        # The record is the only way anyone learns the result: retry a busy database.
        for attempt in range(5):
            try:
                return await self.db.call(
                    crud.finish_execution, execution_id=execution_id, values=values
                )
            except Exception:
                logger.exception("could not record the end of %s (try %d)", execution_id, attempt)
                await asyncio.sleep(0.2 * (attempt + 1))
        return False

    async def _finish_without_process(
        self, record: Execution, state: ExecutionState, *, notice: str | None = None
    ) -> None:
        notices = json.loads(record.notices)
        if notice:
            notices.append(notice)
        text = final_text(
            body="", wall_time_ms=None, notices=notices, state=state, exit_code=None, footer=None
        )
        await self.db.call(
            crud.finish_execution,
            execution_id=record.id,
            values={
                "state": state.value,
                "finished_at": datetime.now(UTC),
                "notices": json.dumps(notices),
                "pending_request": None,
                "output": "",
                "text": text,
            },
        )
        self._notify_state(record.id)

    # --- foreground answering -----------------------------------------------------------------

    async def _answer_foreground(self, launch: Launch) -> Outcome:
        live = launch.live
        if launch.foreground_wait == 0:
            return Outcome(202, await self._backgrounded(live, launch.notices))
        finished = live.finished.wait()
        try:
            await asyncio.wait_for(finished, launch.foreground_wait)
        except TimeoutError:
            if not live.has_exited and self.registry.reserve_job_slot(live):
                live.mode = ExecutionMode.job
                await self.db.call(
                    crud.update_execution,
                    execution_id=live.id,
                    values={"mode": ExecutionMode.job.value},
                )
                self.metrics.auto_backgrounded.inc()
                return Outcome(202, await self._backgrounded(live, launch.notices))
            # No room under the cap: keep the caller waiting rather than exceed it.
            await live.finished.wait()
        record = live.record or await self._record(live.id)
        return Outcome(200, self.to_public(record))

    async def _backgrounded(self, live: LiveExecution, notices: list[str]) -> ExecutionPublic:
        record = await self._record(live.id)
        public = self.to_public(record, live)
        summary = live.summary()
        public.text = backgrounded_text(
            preview=summary.output[-4096:], notices=notices, execution_id=live.id
        )
        return public

    # --- approvals ----------------------------------------------------------------------------

    async def _hold_for_approval(
        self, owner: Principal, draft: Draft, reason: str, request: ExecutionCreate
    ) -> Outcome:
        execution_id, approval_id = new_execution_id(), new_approval_id()
        cwd = self._approval_cwd(draft, owner)
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
            artifact_path=str(self.settings.artifacts_dir / f"{execution_id}.log"),
            approval_id=approval_id,
            # The validated request, so that the approved command can start after a restart.
            pending_request=json.dumps({"owner_role": owner.role, "draft": draft.to_json()}),
            created_at=datetime.now(UTC),
        )
        waiter: asyncio.Future[Launch | None] | None = None
        if not draft.async_ and request.approval_wait > 0:
            # Registered before the approval exists, so that even an instant decision (an
            # automated approver on the stream) finds the caller still holding on.
            waiter = asyncio.get_running_loop().create_future()
            self._approval_waiters[execution_id] = waiter
        try:
            await self.approvals.request(
                execution_id=execution_id,
                command=draft.original_command,
                cwd=cwd,
                reason=reason,
                requested_by=owner.name,
                approval_id=approval_id,
                execution=record,
            )
            if waiter is None:
                return Outcome(202, await self.get(owner, execution_id))
            try:
                launch = await asyncio.wait_for(asyncio.shield(waiter), request.approval_wait)
            except TimeoutError:
                if self._approval_waiters.pop(execution_id, None) is not None:
                    return Outcome(202, await self.get(owner, execution_id))
                # The decision arrived as we gave up; `_on_approval_settled` always resolves
                # the waiter it took, so this wait ends.
                launch = await waiter
        finally:
            # A caller that went away (disconnect, shutdown) leaves; the approved command then
            # runs as a job.
            if self._approval_waiters.get(execution_id) is waiter:
                self._approval_waiters.pop(execution_id, None)
        if launch is None:
            return Outcome(200, await self.get(owner, execution_id))
        return await self._answer_foreground(launch)

    def _approval_cwd(self, draft: Draft, owner: Principal) -> str:
        """Where the command would run, shown to the approver; it is checked only once the
        command is approved (SPEC §2 order: cwd resolution follows the policy)."""
        base = self._session_base(draft.session, owner)
        if not draft.cwd_request:
            return base
        return os.path.normpath(os.path.join(base, os.path.expanduser(draft.cwd_request)))

    async def _on_approval_settled(self, approval: Approval) -> None:
        waiter = self._approval_waiters.pop(approval.execution_id, None)
        launch: Launch | None = None
        failure: Exception | None = None
        try:
            launch = await self._settle_awaiting(approval, caller_waiting=waiter is not None)
        except Exception as error:
            failure = error
        finally:
            # A caller holding its request open always gets an answer, whatever happened.
            if waiter is not None and not waiter.done():
                if failure is not None:
                    waiter.set_exception(failure)
                else:
                    waiter.set_result(launch)

    async def _settle_awaiting(self, approval: Approval, *, caller_waiting: bool) -> Launch | None:
        """Start the approved command, or reject it; raises what a waiting caller should get.

        After approval the command continues where the policy left it (SPEC §2 order): the
        interceptor, which may still block it (→ `rejected`, 422 to the caller), then cwd,
        timeout and mode. With its caller gone it becomes a job, so at the job cap it fails
        with the job-limit message rather than exceed the cap.
        """
        execution_id = approval.execution_id
        record = await self.db.call(crud.get_execution, execution_id=execution_id)
        if record is None or ExecutionState(record.state) is not ExecutionState.awaiting_approval:
            return None
        if approval.state != ApprovalState.approved:
            rejection = _rejection(approval)
            await self._finish_without_process(
                record, ExecutionState.rejected, notice=rejection.message
            )
            raise rejection
        try:
            pending = json.loads(record.pending_request or "{}")
            draft = Draft.from_json(pending["draft"])
            owner = Principal(record.owner, pending.get("owner_role", "agent"))
            return await self._launch(
                execution_id=execution_id,
                owner=owner,
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
                if isinstance(error, InterceptedError)
                else ExecutionState.failed
            )
            await self._finish_without_process(record, state, notice=notice)
            raise

    async def _await_decision_outcome(self, execution_id: str, within: float = 10) -> Execution:
        """The record once a decision made in flight has started or rejected the execution."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while True:
            event = self._state_changed.setdefault(execution_id, asyncio.Event())
            record = await self._record(execution_id)
            remaining = deadline - loop.time()
            if record.state != ExecutionState.awaiting_approval or remaining <= 0:
                return record
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), remaining)

    # ---------------------------------------------------------------------------------------
    # reads
    # ---------------------------------------------------------------------------------------

    async def _record(self, execution_id: str) -> Execution:
        record = await self.db.call(crud.get_execution, execution_id=execution_id)
        if record is None:
            raise NotFoundError(f"execution {execution_id} not found")
        return record

    async def authorize_read(self, principal: Principal, execution_id: str) -> Execution:
        """The record, if this principal may read it (else NotFoundError)."""
        return await self._readable(principal, execution_id)

    async def _readable(self, principal: Principal, execution_id: str) -> Execution:
        record = await self.db.call(crud.get_execution, execution_id=execution_id)
        # Another owner's execution reads as absent: ids are not an oracle for agents.
        if record is None or not (principal.reads_everything or record.owner == principal.name):
            raise NotFoundError(f"execution {execution_id} not found")
        return record

    async def get(
        self, principal: Principal, execution_id: str, wait: float = 0
    ) -> ExecutionPublic:
        record = await self._readable(principal, execution_id)
        if wait > 0 and not ExecutionState(record.state).is_terminal:
            record = await self._wait_terminal(execution_id, wait)
        approval = None
        if record.approval_id and record.state == ExecutionState.awaiting_approval:
            approval = await self.db.call(crud.get_approval, approval_id=record.approval_id)
        return self.to_public(record, self.registry.get(execution_id), approval)

    async def _wait_terminal(self, execution_id: str, wait: float) -> Execution:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            event = self._state_changed.setdefault(execution_id, asyncio.Event())
            record = await self._record(execution_id)
            remaining = deadline - loop.time()
            if ExecutionState(record.state).is_terminal or remaining <= 0:
                return record
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), remaining)

    def _notify_state(self, execution_id: str) -> None:
        event = self._state_changed.pop(execution_id, None)
        if event is not None:
            event.set()

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
        records = await self.db.call(
            crud.list_executions, owner=owner, states=states, limit=limit + 1, cursor=decoded
        )
        next_cursor = crud.encode_cursor(records[limit - 1]) if len(records) > limit else None
        return [
            self.to_public(record, self.registry.get(record.id)) for record in records[:limit]
        ], next_cursor

    async def read_output(
        self, principal: Principal, execution_id: str, offset: int, limit: int
    ) -> OutputPage:
        """Raw log bytes from `offset`. Past the artifact cap the middle of the stream is gone:
        a read there is empty and `next_offset` jumps to the kept tail."""
        record = await self._readable(principal, execution_id)
        live = self.registry.get(execution_id)
        complete = False
        if live is not None:
            log = live.log
        else:
            complete = ExecutionState(record.state).is_terminal
            try:
                log = await anyio.to_thread.run_sync(
                    ArtifactLog.open_existing, self.settings.artifacts_dir, execution_id
                )
            except OSError:
                # Never started (rejected, cancelled while awaiting approval): nothing logged.
                return OutputPage(b"", 0, complete, offset)

        def read() -> OutputPage:
            start = log.next_available(offset)
            data = log.read(start, limit)
            return OutputPage(data, log.total_bytes, complete, start + len(data))

        return await anyio.to_thread.run_sync(read)

    def live_for(self, principal: Principal, execution_id: str) -> LiveExecution | None:
        live = self.registry.get(execution_id)
        if live is None or not (principal.reads_everything or live.owner == principal.name):
            return None
        return live

    async def send_input(self, principal: Principal, execution_id: str, data: bytes) -> None:
        live = await self._controllable(principal, execution_id)
        if live.process is None or not live.process.is_pty:
            raise ConflictError("input needs a PTY execution (pty: true)")
        # Keystrokes into an approved PTY are not re-evaluated by the policy (README): log
        # them so that an audit can see what was typed after the approval.
        logger.info("pty input to %s by %s: %r", execution_id, principal.name, data[:200])
        await anyio.to_thread.run_sync(live.process.write_input, data)

    async def resize(self, principal: Principal, execution_id: str, rows: int, cols: int) -> None:
        live = await self._controllable(principal, execution_id)
        if live.process is None or not live.process.is_pty:
            raise ConflictError("resize needs a PTY execution (pty: true)")
        live.process.resize(clamp(rows, PTY_ROWS), clamp(cols, PTY_COLS))

    async def send_signal(self, principal: Principal, execution_id: str, sig: int) -> None:
        live = await self._controllable(principal, execution_id)
        if live.process is not None:
            if sig in (signal.SIGTERM, signal.SIGKILL):
                live.cancelled = True
                live.process.kill_group_on_exit()
            live.process.signal(sig)

    async def _controllable(self, principal: Principal, execution_id: str) -> LiveExecution:
        live = self.registry.get(execution_id)
        if (
            live is not None
            and not live.has_exited
            and (live.owner == principal.name or principal.is_admin)
        ):
            return live  # keystrokes take this path: no database read per key
        record = await self._readable(principal, execution_id)
        if record.owner != principal.name and not principal.is_admin:
            raise ForbiddenError("only the owner or an admin can drive this execution")
        live = self.registry.get(execution_id)
        if live is None or live.has_exited:
            raise ConflictError(f"execution {execution_id} is not running")
        return live

    def to_public(
        self,
        record: Execution,
        live: LiveExecution | None = None,
        approval: Approval | None = None,
    ) -> ExecutionPublic:
        state = ExecutionState(record.state)
        notices: list[str] = json.loads(record.notices)
        artifact = f"artifact://{record.id}"
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
            text = record.text or final_text(
                body=output,
                wall_time_ms=record.wall_time_ms,
                notices=notices,
                state=state,
                exit_code=record.exit_code,
                footer=None,
            )
        is_error = state in (
            ExecutionState.timed_out,
            ExecutionState.cancelled,
            ExecutionState.failed,
            ExecutionState.lost,
            ExecutionState.rejected,
        )
        approval_summary = None
        if approval is not None:
            approval_summary = ApprovalSummary(
                id=approval.id,
                state=ApprovalState(approval.state),
                reason=approval.reason,
                expires_at=approval.expires_at.replace(tzinfo=approval.expires_at.tzinfo or UTC),
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
            artifact=artifact,
            wall_time_ms=record.wall_time_ms,
            timeout_seconds=record.timeout_seconds,
            requested_timeout_seconds=record.requested_timeout_seconds,
            timeout_disabled=True if record.timeout_disabled else None,
            notices=notices,
            is_error=is_error,
            text=text,
            approval=approval_summary,
            created_at=_aware(record.created_at),
            started_at=_aware(record.started_at),
            finished_at=_aware(record.finished_at),
        )

    # ---------------------------------------------------------------------------------------
    # lifecycle (recovery and pruning live in app/recovery.py)
    # ---------------------------------------------------------------------------------------

    async def shutdown(self) -> None:
        """Stopping the server ends its commands: their groups are killed and they read `lost`."""
        lives = list(self.registry.live.values())
        for live in lives:
            live.lost = True
            self.terminate(live, grace=min(1.0, self.settings.kill_grace_seconds))
        for live in lives:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(live.finished.wait(), 5)
        for task in list(self._tasks):
            task.cancel()

    def _track(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _rejection(approval: Approval) -> ApprovalRejectedError:
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


def _aware(value: datetime | None) -> datetime | None:
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value
