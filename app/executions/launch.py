"""Starting an execution whose policy verdict allows it: the interceptor, artifact references,
the working directory, the timeout and the mode (foreground or job), then the spawn and its
record. What happens once it runs is `lifecycle.py`'s."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from app.confinement import Limits, Unit
from app.core.auth import Principal
from app.core.blocking import run_blocking
from app.core.errors import (
    DescriptorsExhaustedError,
    ForbiddenError,
    InterceptedError,
    InvalidRequestError,
    JobLimitReachedError,
    NotFoundError,
    ProcessesExhaustedError,
    ShuttingDownError,
    StorageFullError,
    is_descriptors_exhausted,
    processes_exhausted_reason,
)
from app.executions.completion import notify_columns
from app.executions.context import Context
from app.executions.draft import (
    Draft,
    Expanded,
    check_as_shown,
    check_directory,
    expand_artifacts,
    referenced_artifacts,
    resolve_draft_timeout,
    shown_cwd,
)
from app.executions.idle import IdleWatch, watch_idle
from app.executions.lifecycle import Lifecycle
from app.executions.pending_record import IntentJournal, PendingRecord
from app.executions.ports import CallRequest, SessionBinding, SessionCall, SessionContext
from app.executions.registry import LiveExecution
from app.executions.timeouts import ResolvedTimeout
from app.governance.service import PolicyService
from app.observability.events import execution_event
from app.output.artifact_log import ArtifactLog
from app.output.window import OutputSink
from app.process import RunningProcess, SpawnSpec, StandbyGone, StandbyShell, boot_id
from app.process.environment import Inheritance, build_environment, inheritance_of
from app.process.exit_witness import witness_channel
from app.sandbox import Sandbox, SandboxProfile
from app.sandbox.bwrap import SpawnBinds
from app.sandbox.host_list import hosts_of, proxy_environment
from app.store import crud
from app.store.models import Execution, ExecutionMode, ExecutionState
from app.store.storage import StorageGuard, is_storage_full

logger = logging.getLogger("shellgate.executions")


def start_log(log: ArtifactLog, storage: StorageGuard) -> None:
    """Create the execution's log files (worker thread); a full disk is `storage_full`."""
    try:
        log.start()
    except OSError as error:
        if not is_storage_full(error):
            raise
        storage.release_reserve()
        raise StorageFullError() from error


@dataclass
class Launch:
    live: LiveExecution
    foreground_wait: float | None  # seconds before auto-background; None = wait to the end
    notices: list[str] = field(default_factory=list)
    # Set while the record is only an intent (pending_record.py): written before an
    # early answer.
    pending: PendingRecord | None = None
    idle: IdleWatch | None = None  # `idle_timeout`: ends the caller's wait (executions/idle.py)


@dataclass(frozen=True)
class _Plan:
    """Everything decided before the spawn."""

    expanded: Expanded
    session: SessionContext | None
    cwd: str
    timeout: ResolvedTimeout
    mode: ExecutionMode
    foreground_wait: float | None
    limits: Limits
    sandbox: SandboxProfile | None  # None: the sandbox is off


def _witness_and_filter(sandbox: Sandbox) -> tuple[tuple[int, int], int | None]:
    """A witness channel (app/process/exit_witness.py) and the seccomp filter's pipe for one
    sandboxed spawn without a standby; neither is left open when the other cannot be made."""
    witness = witness_channel()
    try:
        return witness, sandbox.seccomp_pipe()
    except BaseException:
        for fd in witness:
            os.close(fd)
        raise


@dataclass
class Launcher:
    ctx: Context
    policy: PolicyService
    sessions: SessionBinding
    lifecycle: Lifecycle
    # Recorded with each process, so that restart recovery kills groups of this boot only.
    boot: str = field(default_factory=boot_id)
    intents: IntentJournal = field(init=False)
    inheritance: Inheritance = field(init=False)

    def __post_init__(self) -> None:
        self.intents = IntentJournal(self.ctx.settings.data_dir, self.ctx.settings.node_id)
        self.inheritance = inheritance_of(self.ctx.settings)

    async def launch(
        self,
        *,
        execution_id: str,
        owner: Principal,
        draft: Draft,
        caller_waiting: bool | Callable[[], bool],
        existing: bool = False,
    ) -> Launch:
        """Start the command; `existing`: its record was written while it awaited approval.
        `caller_waiting` may be asked as the mode is chosen (an approved command's caller may
        leave while the command is checked): a caller gone by then gets a job."""
        if self.ctx.changes.refusing:
            raise ShuttingDownError()
        plan = await self._plan(execution_id, owner, draft, caller_waiting, existing)
        live = self._new_live(execution_id, owner.name, plan)
        live.notify_url = draft.notify_url
        # _plan checked this server's count; other replicas' jobs count too (app/cluster).
        if plan.mode is ExecutionMode.job and not await self._claim_job_slot(live):
            raise JobLimitReachedError(self.ctx.registry.max_jobs)
        session_call = self._session_call(live, draft, plan)
        # After an approval this runs in the approver's request: name the execution there too.
        self.ctx.tracing.tag_execution(execution_id)
        deferred = self._may_defer_record(draft, plan, existing, session_call)
        with self.ctx.tracing.span("spawn", execution_id=execution_id, pty=draft.pty):
            process, only_intent = await self._spawn(
                live, owner, draft, plan, existing, session_call, deferred
            )
        pending = None
        if only_intent and live.record is not None:
            pending = PendingRecord(live.record, self.ctx.db, self.intents)
            pending.arm(self._record_delay(plan))
        run_span = self.ctx.tracing.start_run(
            "run", execution_id=execution_id, mode=plan.mode.value
        )
        self.lifecycle.watch(live, plan.timeout, session_call, run_span, pending)
        idle = watch_idle(live, draft.idle_timeout, draft.idle_action, self.ctx.registry)
        self.ctx.changes.notify(execution_id)
        metrics = self.ctx.metrics
        metrics.labelled(metrics.executions_started, plan.mode.value).inc()
        execution_event(
            "started",
            execution_id=execution_id,
            owner=owner.name,
            mode=plan.mode.value,
            pid=process.pid,
            cwd=plan.cwd,
        )
        return Launch(live, plan.foreground_wait, plan.timeout.notices, pending, idle)

    async def _claim_job_slot(self, live: LiveExecution) -> bool:
        try:
            claimed = await self.ctx.registry.claim_job_slot(live)
        except BaseException:
            live.log.delete()
            raise
        if not claimed:
            live.log.delete()  # refused before anything ran: it leaves nothing behind
        return claimed

    def approval_cwd(self, draft: Draft, owner: Principal) -> str:
        """Where the command would run, shown to the approver (checked once approved)."""
        if draft.session is None:
            base = str(self.ctx.settings.workspace)
        else:
            base = self.sessions.known_cwd(draft.session, owner)
        return shown_cwd(draft.cwd_request, base)

    # --- before the spawn ---------------------------------------------------------------------

    async def _plan(
        self,
        execution_id: str,
        owner: Principal,
        draft: Draft,
        caller_waiting: bool | Callable[[], bool],
        existing: bool,
    ) -> _Plan:
        await self._intercept(draft)
        expanded = expand_artifacts(draft, await self._artifact_paths(owner, draft))
        session = None
        if draft.session is not None:
            session = await self.sessions.context(draft.session, owner)
        base = session.cwd if session is not None else str(self.ctx.settings.workspace)
        # Checked in the spawn's worker-thread hop (`check_directory`), not here on the loop.
        cwd = shown_cwd(expanded.cwd_request, base)
        check_as_shown(draft, session_env=session.env if session else None, base=base)
        timeout = resolve_draft_timeout(draft, max_timeout=self.ctx.settings.max_timeout)
        limits = self.ctx.confinement.resolve(
            session.limits if session is not None else None, draft.limits
        )
        # No await from here to the job slot's reservation: the cap checked below still holds,
        # and so does the caller's presence read here.
        waiting = caller_waiting() if callable(caller_waiting) else caller_waiting
        mode, foreground_wait = self._choose_mode(draft, timeout, waiting)
        sandbox = self._sandbox.profile_for(
            draft.sandbox, session.sandbox if session is not None else None
        )
        return _Plan(expanded, session, cwd, timeout, mode, foreground_wait, limits, sandbox)

    @property
    def _sandbox(self) -> Sandbox:
        # Built by ExecutionService whenever it builds the context: never absent here.
        assert self.ctx.sandbox is not None
        return self.ctx.sandbox

    async def _intercept(self, draft: Draft) -> None:
        hit = await self.policy.intercept(
            draft.original_command, draft.tools, rewritten=draft.command
        )
        if hit is not None:
            self.ctx.metrics.interceptions.inc()
            raise InterceptedError(hit.message, details={"tool": hit.tool})

    async def _artifact_paths(self, owner: Principal, draft: Draft) -> dict[str, str]:
        paths: dict[str, str] = {}
        for artifact_id in referenced_artifacts(draft):
            record = await self.ctx.db.call(crud.get_execution, execution_id=artifact_id)
            if record is None:
                raise NotFoundError(f"artifact://{artifact_id} not found")
            if record.owner != owner.name and not owner.is_admin:
                raise ForbiddenError(f"artifact://{artifact_id} belongs to another owner")
            paths[artifact_id] = record.artifact_path
        return paths

    def _choose_mode(
        self, draft: Draft, timeout: ResolvedTimeout, caller_waiting: bool
    ) -> tuple[ExecutionMode, float | None]:
        if draft.streamed:
            # The runner's caller reads the stream to the end: a 202 would break its protocol.
            # Approved after its caller left, it still runs in the foreground, to its deadline.
            return ExecutionMode.foreground, None
        if draft.async_ or not caller_waiting:
            if self.ctx.registry.at_capacity:
                raise JobLimitReachedError(self.ctx.registry.max_jobs)
            return ExecutionMode.job, 0.0
        threshold = self.ctx.settings.auto_background_ms / 1000
        if threshold <= 0 or draft.pty or self.ctx.registry.at_capacity:
            # At the cap auto-background is skipped silently: the call waits to the end.
            return ExecutionMode.foreground, None
        if timeout.seconds is None:
            wait = threshold
        else:
            wait = max(0.0, min(threshold, timeout.seconds - 1))
        if wait == 0:
            return ExecutionMode.job, 0.0
        return ExecutionMode.foreground, wait

    def _may_defer_record(
        self, draft: Draft, plan: _Plan, existing: bool, session_call: SessionCall | None
    ) -> bool:
        """A plain foreground call may be recorded once, at its end (pending_record.py)."""
        return (
            self.ctx.settings.foreground_record_delay_ms > 0
            and plan.mode is ExecutionMode.foreground
            and not (existing or draft.pty or draft.streamed)
        )

    def _record_delay(self, plan: _Plan) -> float:
        """Seconds the `running` row may wait: the setting, and never past the caller's answer
        (which names the id)."""
        delay = self.ctx.settings.foreground_record_delay_ms / 1000
        if plan.foreground_wait is not None:
            delay = min(delay, plan.foreground_wait)
        return delay

    def _new_live(self, execution_id: str, owner: str, plan: _Plan) -> LiveExecution:
        # Its files are created in the spawn's worker-thread hop (`start_log`).
        log = ArtifactLog.new(
            self.ctx.settings.artifacts_dir,
            execution_id,
            max_bytes=self.ctx.settings.artifact_max_bytes,
        )
        live = LiveExecution(
            execution_id,
            owner=owner,
            log=log,
            sink=OutputSink(),
            loop=asyncio.get_running_loop(),
            on_storage_full=self.ctx.storage.release_reserve,
        )
        live.mode = plan.mode
        live.notices = list(plan.timeout.notices)
        return live

    def _session_call(self, live: LiveExecution, draft: Draft, plan: _Plan) -> SessionCall | None:
        if plan.session is None:
            return None
        # The session spawns its own wrapper around the command (state restore and save);
        # the record, the policy and the interceptor only ever see the user's command.
        call = CallRequest(
            execution_id=live.id,
            command=plan.expanded.command,
            caller_env=plan.expanded.env,
            pty=draft.pty,
            may_save_state=plan.mode is ExecutionMode.foreground,
        )
        return self.sessions.begin_call(plan.session, call)

    # --- the spawn and its record -------------------------------------------------------------

    async def _spawn(
        self,
        live: LiveExecution,
        owner: Principal,
        draft: Draft,
        plan: _Plan,
        existing: bool,
        session_call: SessionCall | None,
        deferred: bool,
    ) -> tuple[RunningProcess, bool]:
        """Check for room, open the confinement unit, spawn, and write the record (or its
        intent), in one worker-thread hop (each hop costs on a loaded machine)."""
        if session_call is not None:
            argv, writable = session_call.argv, session_call.writable
        else:
            argv, writable = [self.ctx.settings.shell, "-c", plan.expanded.command], ()
        sandbox, profile = self._sandbox, plan.sandbox
        readable = plan.expanded.artifact_paths
        confinement = self.ctx.confinement
        opened: list[Unit] = []
        spawned: list[RunningProcess] = []
        only_intent: list[bool] = []
        write_record = self._record_writer(live, owner, draft, plan, existing, deferred)

        storage, db, metrics = self.ctx.storage, self.ctx.db, self.ctx.metrics
        fence_watch = self.ctx.registry.fence_watch
        hosts = hosts_of(profile)
        egress_socket: str | None = None

        def spawn(standby: tuple[Unit, StandbyShell] | None, env: dict[str, str]) -> RunningProcess:
            """In the standby's unit, by that shell, or (None, or the standby ended before it
            could take the command) in a unit opened now, by a spawn. (A loop, not a recursive
            call: a closure that names itself is a reference cycle holding the execution.)"""
            while True:
                if standby is not None:
                    unit, shell = standby
                else:
                    unit, shell = confinement.open_unit(live.id, plan.limits), None
                opened[:] = [unit]
                spawned_argv, spawned_env = argv, env
                witness: tuple[int, int] | None = None
                # What the spawn passes on and this thread then closes (the witness channel's
                # writing end, the seccomp filter's pipe).
                passed: tuple[int, ...] = ()
                if shell is not None and session_call is not None:
                    try:
                        spawned_env = session_call.env_with_files(shell.memory_files)
                    except OSError:  # the snapshot could not be read: the usual spawn reads it
                        shell.dismiss()
                        confinement.close_unit(unit, kill=True)
                        standby = None
                        continue
                if profile is not None and shell is None:
                    # Through the shell that joins the cgroups before it execs bwrap
                    # (app/process/confine.sh): the spawn keeps its vfork.
                    binds = SpawnBinds(writable, readable, egress_socket)
                    # How the command itself ends, which bwrap passes on only as an exit
                    # status: its process says so from inside (app/process/exit_witness.py).
                    try:
                        witness, seccomp = _witness_and_filter(sandbox)
                    except OSError:  # no descriptor left for them: nothing runs
                        confinement.close_unit(unit, kill=True)
                        raise
                    passed = (witness[1], *(() if seccomp is None else (seccomp,)))
                    spawned_argv = sandbox.launch(
                        self.ctx.settings.shell,
                        profile,
                        argv,
                        plan.cwd,
                        binds,
                        witness_fd=witness[1],
                        seccomp_fd=seccomp,
                    )
                spec = SpawnSpec(
                    argv=spawned_argv,
                    cwd=plan.cwd,
                    env=spawned_env,
                    pty=draft.pty,
                    rows=draft.rows,
                    cols=draft.cols,
                    confinement=unit.child,
                    nice=self.ctx.settings.command_nice,
                    keep_memory_files=spawned_env is not env,
                    pass_fds=passed,
                    sandboxed=profile is not None,
                )
                # Unsandboxed, nothing in the kernel ends it with this server: the watcher does.
                watched = profile is None
                if watched:
                    fence_watch.spawning(live.id)
                try:
                    process = RunningProcess(
                        spec,
                        live.accept_output,
                        live.accept_exit,
                        live.loop,
                        shell,
                        None if witness is None else witness[0],
                    )
                    if shell is not None and session_call is not None:
                        session_call.adopt_files(shell.take_memory_files())
                except StandbyGone:
                    confinement.close_unit(unit, kill=True)
                    standby = None
                    continue
                except OSError:
                    confinement.close_unit(unit, kill=True)
                    if watched:
                        fence_watch.ended(live.id)
                    raise
                finally:
                    for fd in passed:  # the command's copies are the only ones left
                        os.close(fd)
                if watched:
                    fence_watch.spawned(live.id, process.pgid)
                metrics.labelled(metrics.spawns, "spawn" if shell is None else "standby").inc()
                return process

        def spawn_and_record() -> RunningProcess:
            # Refuse before anything runs when the data directory is full or the database does
            # not answer (`storage_full`, `database_unavailable`): the record is written after
            # the spawn (it holds the pid), so the database must answer first.
            # The spawn is on this worker thread, not on the loop: `Popen` with a preexec_fn
            # forks with the interpreter lock held (the same cost on either side, ~1.2 ms
            # median at 110 MiB RSS, p90 5 ms here), but then waits until the child has run its
            # confinement hooks and exec'd, which on a loaded machine is the child's scheduling
            # delay: the loop would stall for it. The output is then read on the loop
            # (RunningProcess starts its readers there).
            # What the spawn needs from the filesystem is looked up here too, off the loop: the
            # host environment's copy, and whether the standby's sandbox fits (a few dozen
            # path lookups, ≈ 0.2 ms a call that the loop's other requests waited for).
            env = (
                session_call.env
                if session_call is not None
                else build_environment(
                    execution_id=live.id,
                    caller_env=plan.expanded.env,
                    pty=draft.pty,
                    inheritance=self.inheritance,
                )
            )
            if egress_socket is not None:
                env = {**env, **proxy_environment()}
            # A standby waits in the default sandbox: it runs only what that sandbox fits. A
            # session's directory is no obstacle: the standby hands the state over in memory
            # files.
            standby_key = (
                None if draft.pty else sandbox.standby_fit(profile, plan.cwd, bool(readable))
            )
            check_directory(plan.cwd)
            if not storage.has_room():
                raise StorageFullError()
            if not existing:
                db.confirm_reachable()
            start_log(live.log, storage)
            # A standby's sandbox is the one a spawn would build now only while the filesystem
            # its mounts came from is unchanged (a hidden path made since is not covered in it).
            process = spawn(
                confinement.take_standby(live.id, plan.limits, standby_key)
                if standby_key is not None
                else None,
                env,
            )
            spawned.append(process)
            try:
                only_intent.append(write_record(process))
            except Exception:
                # Without a record nobody could ever see or cancel it: do not let it run.
                process.kill_group()
                confinement.close_unit(opened[0], kill=True)
                raise
            return process

        try:
            if hosts is not None:
                # A host list: the server's proxy listens for this execution before its
                # sandbox is built around the socket (app/sandbox/host_list.py); it closes when
                # the run ends (the lifecycle), or here.
                egress_socket = await sandbox.egress.open(live.id, hosts)
            process = await run_blocking(spawn_and_record)
        except Exception as error:
            if hosts is not None:
                await sandbox.egress.close(live.id)
            self.ctx.registry.release_job_slot(live)
            if session_call is not None:
                session_call.abandon()
            if not spawned and existing:
                live.log.finish()  # the approved record's log: it ran nothing
            elif not spawned:
                live.log.delete()  # no record will ever name it
            if spawned or not isinstance(error, OSError):
                raise  # refused before the spawn, or the record failed: the command was killed
            if is_descriptors_exhausted(error):
                raise DescriptorsExhaustedError() from error
            reason = processes_exhausted_reason(error)
            if reason is not None:
                raise ProcessesExhaustedError(reason) from error
            raise InvalidRequestError(f"could not start the command: {error.strerror}") from error
        live.process = process
        live.sandbox = plan.sandbox
        live.unit = opened[0]
        live.unit.session_id = draft.session
        self.ctx.registry.add(live)
        if session_call is not None:
            session_call.started(live)
        return process, only_intent[0]

    def _record_writer(
        self,
        live: LiveExecution,
        owner: Principal,
        draft: Draft,
        plan: _Plan,
        existing: bool,
        deferred: bool,
    ) -> Callable[[RunningProcess], bool]:
        """What writes the `running` record (or, `deferred`, its intent) once the process
        exists (it holds the pid); runs in the spawn's worker thread."""
        db, boot, confinement_name = self.ctx.db, self.boot, self.ctx.confinement.name
        intents = self.intents
        timeout = plan.timeout
        settled: dict[str, Any] = {
            "command": plan.expanded.command,
            "cwd": plan.cwd,
            "state": ExecutionState.running.value,
            "mode": plan.mode.value,
            "pty": draft.pty,
            "session_id": draft.session,
            "boot_id": boot,
            "timeout_seconds": timeout.seconds,
            "requested_timeout_seconds": timeout.requested if timeout.clamped else None,
            "timeout_disabled": timeout.disabled,
            "notices": json.dumps(timeout.notices),
            "limits": json.dumps(plan.limits.as_dict()),
            "confinement": confinement_name,
            "sandbox": json.dumps(plan.sandbox.to_record()) if plan.sandbox else None,
            "artifact_path": str(live.log.path),
            "pending_request": None,
            "node": self.ctx.settings.node_id or None,
            "policy_reason": draft.policy_reason,
            "remembered_rule": draft.remembered_rule,
            **notify_columns(draft.notify_url),
        }

        def write(process: RunningProcess) -> bool:
            """True if only the intent was written."""
            now = datetime.now(UTC)
            values = {
                **settled,
                "pid": process.pid,
                "pgid": process.pgid,
                "proc_start_ticks": process.start_ticks,
                "started_at": now,
            }
            if existing:
                db.run_in_transaction(crud.update_execution, execution_id=live.id, values=values)
                return False
            record = Execution(
                id=live.id,
                owner=owner.name,
                original_command=draft.original_command,
                created_at=now,
                **values,
            )
            if deferred:
                try:
                    intents.write(crud.execution_row(record))
                except OSError:
                    logger.warning("no intent kept for %s: recorded at once", live.id)
                else:
                    live.record = record
                    return True
            live.record = db.run_in_transaction(crud.insert_execution, execution=record)
            return False

        return write
