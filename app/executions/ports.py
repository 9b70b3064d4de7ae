"""What an execution needs from the session it runs in. `app/sessions/service.py` provides it; this
module only names the shape, so that neither side imports the other."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.core.auth import Principal
from app.executions.registry import LiveExecution
from app.store.models import Execution


class NodeRole(Protocol):
    """This replica among others sharing the database (app/cluster provides it)."""

    async def settles(self, record: Execution) -> bool:
        """Whether this replica starts or rejects `record` once its approval is decided."""


class _LocalNode:
    async def settles(self, record: Execution) -> bool:
        return True


LOCAL_NODE: NodeRole = _LocalNode()

# Returns once the caller of a held call has gone away (its connection closed). The HTTP layer
# provides it (app/api/disconnect.py); without it (the MCP tools, the CLI's in-process calls)
# a held call ends by its time, the server's stop or its task's cancel.
CallerGone = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class SessionContext:
    id: str
    cwd: str
    env: dict[str, str]
    pty: bool
    limits: dict[str, int | None] = field(default_factory=dict)
    keep_cwd: bool = False  # the owning call's last directory becomes the session's cwd
    # The sandbox profile the session was given when it was created (its record form,
    # app/sandbox/profile.py); None: made while the sandbox was off.
    sandbox: dict[str, Any] | None = None


@dataclass(frozen=True)
class CallRequest:
    """One execution the session is asked to run."""

    execution_id: str
    command: str
    caller_env: dict[str, str] | None
    pty: bool
    may_save_state: bool  # a foreground call may become the session's state owner


class SessionCall(Protocol):
    """One execution inside a session: what to spawn instead of `bash -c <command>`, and the
    session's bookkeeping around the process's life."""

    argv: list[str]
    env: dict[str, str]
    # Paths of the server's own the call must write though they are hidden from commands
    # (the session's state directory, inside the data dir), when it is spawned rather than
    # exec'd by a standby (see `env_with_files`).
    writable: tuple[str, ...]

    def env_with_files(self, files: tuple[int, ...]) -> dict[str, str]:
        """Blocking: `env` for a process exec'd by a standby, whose sandbox was built before
        this call and so cannot show the session's directory: the state goes through the
        standby's memory files (`files`) instead, the snapshot copied into them first."""
        ...

    def adopt_files(self, files: tuple[int, ...]) -> None:
        """The process runs with those memory files: they are the call's now (read once it
        ended, then closed)."""

    def started(self, live: LiveExecution) -> None: ...

    def settle_plan(self, live: LiveExecution) -> Callable[[], str | None]:
        """On the loop, after the process exited: what its end does to the session's state,
        as blocking work run before the terminal record is written (it returns a directory
        the session's cwd should follow, which then waits for `settled` before the record)."""
        ...

    async def settled(self, ended_in: str | None) -> None:
        """After `settle_plan`'s work (None also when it failed or never ran)."""

    def abandon(self) -> None:
        """The process never ran (or was killed before anyone could see it)."""


class SessionBinding(Protocol):
    async def context(self, session_id: str, principal: Principal) -> SessionContext:
        """The session if this principal may use it, else NotFoundError."""

    def known_cwd(self, session_id: str, principal: Principal) -> str:
        """The cwd of a session `context` has already loaded (no I/O), else NotFoundError."""

    def begin_call(self, context: SessionContext, call: CallRequest) -> SessionCall:
        """Take the call into the session's bookkeeping; NotFoundError if it is gone."""
        ...

    def when_deleted(self, hook: Callable[[str], Awaitable[None]]) -> None:
        """Have `hook(session_id)` awaited once a deleted session's calls have ended."""
