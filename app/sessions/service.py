"""Sessions (docs/streaming.md#sessions): a configuration (cwd, env, timeout, pty) plus a
persistent shell state.

A session is not a long-lived bash process. Each call is a fresh `bash -c` in its own process
group, so timeouts, group kills, the output log, streaming and PTYs work exactly as for any
execution. What persists is the shell *state*: the exported variables, functions and aliases
that the calls define, kept in `<data_dir>/sessions/<id>/state.sh` (an emulation of a
long-lived shell; docs/streaming.md#sessions says where it differs). The command spawned for
a call is `WRAPPER` (`app/sessions/session_wrapper.sh`), which

1. restores the snapshot (sourced with stdio on /dev/null, `expand_aliases` on);
2. lays the call's own `env` over it, then runs the user's command with `eval`, the command text
   arriving in an environment variable (never spliced into shell text), in the session's cwd
   (set afresh on every call: a `cd` does not carry over, unless the session has `keep_cwd`:
   then the owning call's EXIT trap also writes `$PWD`, and the server makes it the session's
   `cwd` when it commits the state);
3. on EXIT (a trap, so `exit 3` still saves; the exit status is kept) writes the exported
   variables that differ from the environment the shell was started with (host defaults plus
   the session's env) as `export` / `unset -v` lines, every function and every alias, to a
   working file (`state.next`), which the server renames over the snapshot once the process has
   ended, only
   when this call holds the session's lease and ended by itself (and only when it differs).
   A call that changed no exported variable keeps the snapshot's variable lines as they were,
   and a call that cannot save does no bookkeeping at all: the wrapper's cost is per variable,
   so the common case skips it (the script's header says how).

Rules around the lease (docs/streaming.md#sessions): one call at a time owns the state. A call
that arrives while another runs becomes a one-shot shell: it restores the snapshot but does not
save. Background jobs (`async`) never save. A timeout or a cancel of the owning call resets the
state (the snapshot is deleted), as does changing the session's `env` (another env makes
another shell). Per-call env values are not saved unless the command itself changed them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import anyio.to_thread

from app.confinement import Confinement
from app.core.auth import Principal
from app.core.config import Settings
from app.core.errors import (
    ConflictError,
    ForbiddenError,
    NotFoundError,
    SessionLimitError,
    SessionLostError,
)
from app.core.random_ids import random_token
from app.executions import sandboxing
from app.executions.draft import resolve_cwd
from app.executions.ports import CallRequest, SessionCall, SessionContext
from app.executions.registry import LiveExecution, Registry
from app.governance.service import PolicyService
from app.policy.env_rules import validate_env
from app.process.environment import build_environment, inheritance_of
from app.sandbox import Sandbox
from app.schemas import (
    ApprovalSummary,
    SessionCreate,
    SessionPatch,
    SessionPending,
    SessionPublic,
    ToolObject,
)
from app.sessions.runner import runner_tool
from app.sessions.sandbox_approval import SessionSandboxApprovals
from app.sessions.snapshot import (
    NotOwnFile,
    copy_state_into,
    install_saved_memory,
    install_state,
    open_own_file,
)
from app.store import crud
from app.store.db import Database
from app.store.models import Approval, ApprovalState, ShellSession
from app.store.timestamps import aware_utc

logger = logging.getLogger("shellgate.sessions")

STATE_FILE = "state.sh"
# The owning call's working files, one pair per session (one call at a time owns the state):
# what its EXIT trap writes, and the wrapper's scratch listing. Emptied after each call, not
# removed: a file made and freed per call made every later file creation in the data
# directory skip the freed inode on this project's ext4 without a journal (bench/PROFILE.md,
# "Files per call").
NEXT_STATE_FILE = "state.next"
SCRATCH_FILE = "scratch.names"
# With `keep_cwd`, the owning call's last working directory (`$PWD`, written by its EXIT trap).
CWD_FILE = "cwd.next"
# The most of it read: a path longer than the kernel's PATH_MAX names no directory.
MAX_CWD_BYTES = 4096
DELETE_WAIT_SECONDS = 5.0

# The script each call runs (see the module docstring), shipped next to this module.
WRAPPER = resources.files("app.sessions").joinpath("session_wrapper.sh").read_text(encoding="utf-8")


def new_session_id() -> str:
    return "se_" + random_token(15)


# --- the in-memory side -----------------------------------------------------------------------


@dataclass
class SessionRuntime:
    """Calls of one session in this server process."""

    lease: str | None = None  # the execution allowed to save the state
    # A reset (timeout, cancel, env change, delete) bumps it: older calls no longer save.
    generation: int = 0
    calls: dict[str, LiveExecution | None] = field(default_factory=dict)
    deleted: bool = False


class _Call:
    """One execution in a session (`SessionCall` of app/executions/ports.py)."""

    def __init__(
        self,
        service: SessionService,
        runtime: SessionRuntime,
        *,
        session_id: str,
        execution_id: str,
        argv: list[str],
        env: dict[str, str],
        save_to: Path | None,
        scratch: Path,
        writable: tuple[str, ...],
        cwd_to: Path | None = None,
        started_cwd: str = "",
    ) -> None:
        self.argv = argv
        self.env = env
        self.writable = writable
        self._service = service
        self._runtime = runtime
        self._session_id = session_id
        self._execution_id = execution_id
        self._save_to = save_to
        self._scratch = scratch
        self._cwd_to = cwd_to
        self._started_cwd = started_cwd
        self._generation = runtime.generation
        # A standby's memory files when one ran the call (state, saved, scratch, cwd).
        self._files: tuple[int, ...] = ()

    @property
    def _owns_state(self) -> bool:
        return self._save_to is not None and self._runtime.lease == self._execution_id

    def env_with_files(self, files: tuple[int, ...]) -> dict[str, str]:
        state, saved, scratch, cwd = (f"/dev/fd/{fd}" for fd in files)
        copy_state_into(self._state, files[0])
        env = {**self.env, "__SHELLGATE_STATE": state, "__SHELLGATE_SCRATCH": scratch}
        if self._save_to is not None:
            env["__SHELLGATE_SAVE_TO"] = saved
        if self._cwd_to is not None:
            env["__SHELLGATE_CWD_TO"] = cwd
        return env

    def adopt_files(self, files: tuple[int, ...]) -> None:
        self._files = files

    def started(self, live: LiveExecution) -> None:
        self._runtime.calls[self._execution_id] = live
        if self._runtime.deleted:
            # The session was deleted while this call was being spawned.
            self._service.registry.cancel(live)

    def settle_plan(self, live: LiveExecution) -> Callable[[], str | None]:
        """On the loop: decide what the call's end does to the state, and return that work
        (blocking; the caller runs it on its worker thread with the unit's end and the record,
        one hop for all three: bench/PROFILE.md, "One hop at a session call's end")."""
        decides = self._owns_state and not live.lost  # a server stop leaves the state alone
        # A shell cut off mid-command may hold half-made state: the next call starts clean.
        reset = decides and (live.timed_out or live.cancelled)
        commit = decides and not reset and self._generation == self._runtime.generation
        if reset:
            self._runtime.generation += 1
        return functools.partial(self._settle_files_and_lease, reset, commit)

    async def settled(self, ended_in: str | None) -> None:
        """On the loop, after `settle_plan`'s work ran (or failed: `ended_in` None)."""
        try:
            if ended_in is not None:
                await self._service.follow_cwd(self._session_id, self._started_cwd, ended_in)
        finally:
            self._close_files()
            self._release()

    def abandon(self) -> None:
        self._empty_working_files()  # a failure path, rare: file calls on the loop are fine
        self._close_files()
        self._release()

    @property
    def _state(self) -> Path:
        return self._scratch.with_name(STATE_FILE)

    def _close_files(self) -> None:
        files, self._files = self._files, ()
        for fd in files:
            os.close(fd)

    def _release(self) -> None:
        if self._runtime.lease == self._execution_id:
            self._runtime.lease = None
        self._runtime.calls.pop(self._execution_id, None)
        self._service.forget_idle(self._session_id, self._runtime)

    def _settle_files_and_lease(self, reset: bool, commit: bool) -> str | None:
        """Blocking: installs the new state, then frees the lease, before the record turns
        terminal (a client that sees the end and calls again at once must find both: the
        state, and the session free, so that its call saves). Only the owning call writes
        files; a one-shot call leaves nothing behind. The lease is the only loop state
        touched here: it goes from this call's id to None, and the loop only ever takes a
        lease that is None, so the two cannot undo each other."""
        # A reset (PATCH of the env, delete) that came while this call's end waited for its
        # thread wins over the state it saved.
        commit = commit and self._generation == self._runtime.generation
        try:
            return self._settle_files(reset, commit) if self._save_to is not None else None
        finally:
            if self._runtime.lease == self._execution_id:
                self._runtime.lease = None

    def _settle_files(self, reset: bool, commit: bool) -> str | None:
        """Installs the new state; returns the directory the call ended in when the session
        keeps it (and it still is a directory), else None."""
        state = self._state
        ended_in = None
        if reset:
            state.unlink(missing_ok=True)
        elif commit and self._save_to is not None:
            try:
                if self._files:
                    install_saved_memory(self._files[1], state, self._save_to)
                else:
                    install_state(self._save_to, state)
            except FileNotFoundError:
                pass  # no call saved yet, and this one died before its EXIT trap
            except NotOwnFile as error:
                # Its command put something else there (app/sessions/snapshot.py).
                logger.warning(
                    "session %s: %s is not a regular file; the state stays as it was",
                    self._session_id,
                    error.filename,
                )
            if self._cwd_to is not None:
                ended_in = _last_directory(self._cwd_to, self._files[3] if self._files else None)
        self._empty_working_files()
        return ended_in

    def _empty_working_files(self) -> None:
        """Nothing of the call's listings stays on disk (they hold every exported value, the
        call's own env too); the files stay for the next owning call. Only the owning call
        has any: another must not empty what the owner is using."""
        if self._save_to is None or self._files:  # memory files hold nothing on disk
            return
        for working in (self._save_to, self._scratch, self._cwd_to):
            if working is not None:
                with contextlib.suppress(OSError):
                    fd = open_own_file(working, os.O_WRONLY)
                    try:
                        os.ftruncate(fd, 0)
                    finally:
                        os.close(fd)


def _last_directory(written: Path, memory_file: int | None) -> str | None:
    """What the EXIT trap wrote (into `written`, or the `memory_file` a standby held), when it
    names a directory that still exists: a call that ended in a directory it then removed
    leaves the session's cwd where it was."""
    try:
        # Never more than a path's length: the command can write a gigabyte there.
        if memory_file is not None:
            raw = os.pread(memory_file, MAX_CWD_BYTES + 1, 0)
        else:
            fd = open_own_file(written)
            try:
                raw = os.pread(fd, MAX_CWD_BYTES + 1, 0)
            finally:
                os.close(fd)
        if len(raw) > MAX_CWD_BYTES:
            return None
        ended_in = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if not ended_in.startswith("/") or "\0" in ended_in or not os.path.isdir(ended_in):
        return None
    return ended_in


class SessionService:
    """The sessions' use-cases, and the `SessionBinding` through which executions run in them."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        registry: Registry,
        policy: PolicyService,
        confinement: Confinement,
        sandbox: Sandbox | None = None,
        sandbox_approvals: SessionSandboxApprovals | None = None,
    ) -> None:
        self.settings = settings
        self._inheritance = inheritance_of(settings)
        # A session's calls run in the profile it was given at its creation.
        self._sandbox = sandbox if sandbox is not None else Sandbox(settings)
        self.db = db
        self.registry = registry
        self._policy = policy
        self._confinement = confinement  # session limits are checked against the server's
        self._directory = settings.data_dir / "sessions"
        # Sessions loaded since start; every change goes through this service, so it stays true.
        self._known: dict[str, ShellSession] = {}
        self._runtimes: dict[str, SessionRuntime] = {}
        self._directory_checked: set[str] = set()
        # Awaited with the id of each deleted session once its calls have ended.
        self._deleted_hooks: list[Callable[[str], Awaitable[None]]] = []
        # A new session's sandbox request asks through these (none: such requests are refused).
        self._sandbox_approvals = sandbox_approvals

    # ---------------------------------------------------------------------------------------
    # the API's use-cases
    # ---------------------------------------------------------------------------------------

    async def create(
        self, principal: Principal, body: SessionCreate
    ) -> SessionPublic | SessionPending:
        """The new session; or, when its sandbox request awaits a human, what it waits on."""
        principal.require("agent", "admin")
        validate_env(body.env)
        # Judged now (a denied name → 403, nothing stored) and again at every call, under the
        # policy in force then: a prompted name is accepted here and prompts on each call.
        self._policy.refuse_denied_env(body.env)
        limits = body.limits.model_dump(exclude_none=True) if body.limits else {}
        self._confinement.resolve(limits)  # above the server's → 422
        cwd = await anyio.to_thread.run_sync(resolve_cwd, body.cwd, str(self.settings.workspace))
        # The profile every call will have, fixed now: more than the policy's asks a human.
        # `sandbox` (record form: the policy's profile, or the approved grant) is what the
        # session's `sandbox` column keeps (null while the sandbox is off: nothing enforces it).
        sandbox = await self._sandbox_for(principal, body, cwd)
        if isinstance(sandbox, SessionPending):
            return sandbox
        now = datetime.now(UTC)
        record = ShellSession(
            id=new_session_id(),
            owner=principal.name,
            cwd=cwd,
            env=json.dumps(body.env or {}),
            timeout_ms=body.timeout_ms,
            pty=body.pty,
            keep_cwd=body.keep_cwd,
            limits=json.dumps(limits),
            sandbox=json.dumps(sandbox) if self._sandbox.enforced else None,
            node=self.settings.node_id or None,
            created_at=now,
            updated_at=now,
        )
        await anyio.to_thread.run_sync(self._make_directory, record.id)
        inserted = await self.db.call(
            crud.insert_session_within, record=record, max_open=self.settings.max_sessions
        )
        if inserted is None:
            await anyio.to_thread.run_sync(self._remove_directory, record.id)
            raise SessionLimitError(self.settings.max_sessions)
        record = inserted
        self._directory_checked.add(record.id)
        self._known[record.id] = record
        logger.info(
            "session %s created for %s in %s (sandbox network %s%s)",
            record.id,
            principal.name,
            cwd,
            sandbox["network"],
            ", escalated" if sandbox["escalated"] else "",
        )
        return self.to_public(record)

    async def list_for(self, principal: Principal) -> list[SessionPublic]:
        owner = None if principal.reads_everything else principal.name
        records = await self.db.call(crud.list_live_sessions, owner=owner)
        return [self.to_public(record) for record in records]

    async def get(self, principal: Principal, session_id: str) -> SessionPublic:
        return self.to_public(await self._readable(principal, session_id))

    async def tool(self, principal: Principal, session_id: str) -> dict[str, Any]:
        record = await self._readable(principal, session_id)
        return runner_tool(record.timeout_ms, pty=record.pty)

    async def patch(
        self, principal: Principal, session_id: str, body: SessionPatch
    ) -> SessionPublic:
        record = await self.usable(principal, session_id)
        values: dict[str, Any] = {}
        if body.cwd is not None:
            values["cwd"] = await anyio.to_thread.run_sync(
                resolve_cwd, body.cwd, str(self.settings.workspace)
            )
        env_changed = False
        if body.env is not None:
            validate_env(body.env)
            self._policy.refuse_denied_env(body.env)
            env_changed = body.env != json.loads(record.env)
            values["env"] = json.dumps(body.env)
        if body.timeout_ms is not None:
            values["timeout_ms"] = body.timeout_ms
        if body.pty is not None:
            values["pty"] = body.pty
        if body.keep_cwd is not None:
            values["keep_cwd"] = body.keep_cwd
        if body.limits is not None:
            limits = body.limits.model_dump(exclude_none=True)
            self._confinement.resolve(limits)  # above the server's → 422
            values["limits"] = json.dumps(limits)
        values["updated_at"] = datetime.now(UTC)
        updated = await self.db.call(crud.update_session, session_id=session_id, values=values)
        if updated is None:
            raise NotFoundError(f"session {session_id} not found")
        record = updated
        self._known[session_id] = record
        if env_changed:
            # Another env is another shell: the state saved under the old one does not carry over.
            await self.reset_state(session_id, self._runtime(session_id))
        return self.to_public(record)

    async def delete(self, principal: Principal, session_id: str) -> None:
        """Ends the session: later use is a 404; its running calls are cancelled."""
        await self.usable(principal, session_id)
        await self.db.call(
            crud.update_session, session_id=session_id, values={"deleted_at": datetime.now(UTC)}
        )
        self._known.pop(session_id, None)
        runtime = self._runtimes.get(session_id)
        lives: list[LiveExecution] = []
        if runtime is not None:
            runtime.deleted = True
            runtime.generation += 1
            lives = [live for live in runtime.calls.values() if live is not None]
            for live in lives:
                self.registry.cancel(live)
        for live in lives:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    live.finished.wait(), self.settings.kill_grace_seconds + DELETE_WAIT_SECONDS
                )
        for hook in self._deleted_hooks:
            await hook(session_id)
        await anyio.to_thread.run_sync(
            lambda: shutil.rmtree(self._session_directory(session_id), ignore_errors=True)
        )
        self._runtimes.pop(session_id, None)
        self._directory_checked.discard(session_id)
        logger.info("session %s deleted by %s", session_id, principal.name)

    async def _sandbox_for(
        self, principal: Principal, body: SessionCreate, cwd: str
    ) -> dict[str, Any] | SessionPending:
        """The session's profile (record form), or the approval it waits on."""
        decision = sandboxing.for_new_session(self._policy, body.sandbox)
        request = decision.approval_request()
        if request is None:
            return decision.profile.to_record()
        if self._sandbox_approvals is None:
            raise ConflictError("this server takes no session sandbox requests")
        approval_id = body.approval_id
        if approval_id is None:
            asked = await self._sandbox_approvals.ask(
                principal, decision, cwd=cwd, wait=body.approval_wait
            )
            approval_id = asked.id
        taken = await self._sandbox_approvals.take(principal, approval_id, request)
        if isinstance(taken, Approval):
            return SessionPending(
                approval=ApprovalSummary(
                    id=taken.id,
                    state=ApprovalState(taken.state),
                    reason=taken.reason,
                    expires_at=aware_utc(taken.expires_at),
                ),
            )
        return taken

    def to_public(self, record: ShellSession) -> SessionPublic:
        runtime = self._runtimes.get(record.id)
        return SessionPublic(
            id=record.id,
            owner=record.owner,
            cwd=record.cwd,
            env=json.loads(record.env),
            timeout_ms=record.timeout_ms,
            pty=record.pty,
            keep_cwd=record.keep_cwd,
            limits=json.loads(record.limits or "{}"),
            sandbox=json.loads(record.sandbox) if record.sandbox else None,
            busy=runtime is not None and runtime.lease is not None,
            created_at=aware_utc(record.created_at),
            updated_at=aware_utc(record.updated_at),
            tool=ToolObject.model_validate(runner_tool(record.timeout_ms, pty=record.pty)),
        )

    # ---------------------------------------------------------------------------------------
    # SessionBinding (app/executions/ports.py): executions running in a session
    # ---------------------------------------------------------------------------------------

    async def context(self, session_id: str, principal: Principal) -> SessionContext:
        record = await self.usable(principal, session_id)
        if session_id not in self._directory_checked:
            # Once per session and server run (a data dir restored without it, say).
            await anyio.to_thread.run_sync(self._make_directory, session_id)
            self._directory_checked.add(session_id)
        return SessionContext(
            id=record.id,
            cwd=record.cwd,
            env=json.loads(record.env),
            pty=record.pty,
            limits=json.loads(record.limits or "{}"),
            sandbox=json.loads(record.sandbox) if record.sandbox else None,
            keep_cwd=record.keep_cwd,
        )

    def known_cwd(self, session_id: str, principal: Principal) -> str:
        record = self._known.get(session_id)
        if record is None or not self._may_use(record, principal):
            raise NotFoundError(f"session {session_id} not found")
        return record.cwd

    def when_deleted(self, hook: Callable[[str], Awaitable[None]]) -> None:
        self._deleted_hooks.append(hook)

    def begin_call(self, context: SessionContext, call: CallRequest) -> SessionCall:
        runtime = self._runtime(context.id)
        if runtime.deleted or context.id not in self._known:
            raise NotFoundError(f"session {context.id} not found")
        execution_id, pty = call.execution_id, call.pty
        directory = self._session_directory(context.id)
        save_to: Path | None = None
        if call.may_save_state and runtime.lease is None:
            runtime.lease = execution_id
            save_to = directory / NEXT_STATE_FILE
        runtime.calls[execution_id] = None
        session_env = build_environment(
            execution_id=execution_id,
            caller_env=context.env,
            pty=pty,
            inheritance=self._inheritance,
        )
        # The call's own env reaches the wrapper under other names: it is applied after the
        # restore (so it wins over the saved state) and left out of the next snapshot.
        overlay: dict[str, str] = {}
        if call.caller_env:
            with_call = build_environment(
                execution_id=execution_id,
                caller_env={**context.env, **call.caller_env},
                pty=pty,
                inheritance=self._inheritance,
            )
            overlay = {
                key: value for key, value in with_call.items() if session_env.get(key) != value
            }
        env = dict(session_env)
        env["__SHELLGATE_COMMAND"] = call.command
        env["__SHELLGATE_STATE"] = str(directory / STATE_FILE)
        scratch = directory / SCRATCH_FILE
        env["__SHELLGATE_SCRATCH"] = str(scratch)
        cwd_to: Path | None = None
        if save_to is not None:
            env["__SHELLGATE_SAVE_TO"] = str(save_to)
            if context.keep_cwd:
                cwd_to = directory / CWD_FILE
                env["__SHELLGATE_CWD_TO"] = str(cwd_to)
        env["__SHELLGATE_CALL_KEYS"] = " ".join(overlay)
        for key, value in overlay.items():
            env[f"__SHELLGATE_CALL_{key}"] = value
        return _Call(
            self,
            runtime,
            session_id=context.id,
            execution_id=execution_id,
            argv=[self.settings.shell, "-c", WRAPPER],
            env=env,
            save_to=save_to,
            scratch=scratch,
            writable=(str(directory),),
            cwd_to=cwd_to,
            started_cwd=context.cwd,
        )

    # ---------------------------------------------------------------------------------------
    # internals
    # ---------------------------------------------------------------------------------------

    async def follow_cwd(self, session_id: str, started_cwd: str, ended_in: str) -> None:
        """A `keep_cwd` session's next call starts where its owning call ended, unless the
        session's cwd was changed (PATCH) while the call ran: that change wins."""
        record = self._known.get(session_id)
        if record is None or record.cwd != started_cwd or ended_in == started_cwd:
            return
        updated = await self.db.call(
            crud.update_session,
            session_id=session_id,
            values={"cwd": ended_in, "updated_at": datetime.now(UTC)},
        )
        if updated is not None and updated.deleted_at is None:
            self._known[session_id] = updated

    async def reset_state(self, session_id: str, runtime: SessionRuntime) -> None:
        runtime.generation += 1
        state = self._session_directory(session_id) / STATE_FILE
        await anyio.to_thread.run_sync(lambda: state.unlink(missing_ok=True))

    def forget_idle(self, session_id: str, runtime: SessionRuntime) -> None:
        if runtime.calls or runtime.lease is not None:
            return
        if self._runtimes.get(session_id) is runtime and not runtime.deleted:
            # Its generation only matters to calls that are still running: there are none.
            del self._runtimes[session_id]

    def _runtime(self, session_id: str) -> SessionRuntime:
        return self._runtimes.setdefault(session_id, SessionRuntime())

    def _session_directory(self, session_id: str) -> Path:
        return self._directory / session_id

    def _remove_directory(self, session_id: str) -> None:
        """The directory of a session that was refused (still empty)."""
        with contextlib.suppress(OSError):
            self._session_directory(session_id).rmdir()

    def _make_directory(self, session_id: str) -> None:
        self._directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        directory = self._session_directory(session_id)
        directory.mkdir(mode=0o700, exist_ok=True)
        # The snapshot holds the session's variables, secrets included: owner-only.
        os.chmod(directory, 0o700)

    def forget_cached(self) -> None:
        """Read every session from the database again: after this replica was silent for longer
        than the node timeout, the cluster may have declared its sessions lost meanwhile."""
        self._known.clear()

    async def _load(self, session_id: str) -> ShellSession:
        record = self._known.get(session_id)
        if record is not None and record.node not in (None, self.settings.node_id):
            record = None  # another replica's: whether it still lives is the database's to say
        if record is None:
            record = await self.db.call(crud.get_live_session, session_id=session_id)
            if record is None:
                raise NotFoundError(f"session {session_id} not found")
            self._known[session_id] = record
        return record

    async def _readable(self, principal: Principal, session_id: str) -> ShellSession:
        record = principal.readable(await self._load(session_id), f"session {session_id}")
        if record.lost_at is not None:
            self._known.pop(session_id, None)
            raise SessionLostError(session_id, record.node)
        return record

    async def usable(self, principal: Principal, session_id: str) -> ShellSession:
        record = await self._readable(principal, session_id)
        if not self._may_use(record, principal):
            raise ForbiddenError("only the owner or an admin can use this session")
        return record

    @staticmethod
    def _may_use(record: ShellSession, principal: Principal) -> bool:
        return principal.is_admin or (principal.role == "agent" and record.owner == principal.name)
