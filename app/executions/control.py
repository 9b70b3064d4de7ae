"""Driving a running execution: keystrokes, terminal size, signals, cancel. Only its owner or
an admin may; keystrokes take a path without a database read."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from app.core.auth import Principal
from app.core.errors import ConflictError, ForbiddenError
from app.executions.context import Context
from app.executions.draft import PTY_COLS, PTY_ROWS, clamp
from app.executions.registry import LiveExecution
from app.executions.views import ExecutionReader
from app.store.models import Execution

logger = logging.getLogger("shellgate.executions")

# Beyond the kill grace: how long a cancel waits for the terminal record before answering.
CANCEL_RECORD_MARGIN_SECONDS = 5.0


def require_control(principal: Principal, record: Execution, action: str) -> None:
    if record.owner != principal.name and not principal.is_admin:
        raise ForbiddenError(f"only the owner or an admin can {action} this execution")


class Controls:
    def __init__(self, context: Context, reader: ExecutionReader) -> None:
        self._registry = context.registry
        self._reader = reader

    async def send_input(self, principal: Principal, execution_id: str, data: bytes) -> None:
        live = await self._controllable(principal, execution_id)
        if live.process is None or not live.process.is_pty:
            raise ConflictError("input needs a PTY execution (pty: true)")
        # Keystrokes into an approved PTY are not re-evaluated by the policy (README): log
        # them so that an audit can see what was typed after the approval.
        logger.info("pty input to %s by %s: %r", execution_id, principal.name, data[:200])
        # On the loop: a non-blocking write to the terminal, no thread hop per keystroke.
        await live.process.send_input(data)

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

    async def cancel_running(self, execution_id: str) -> None:
        """Terminate the group of a running execution and wait for its terminal record."""
        live = self._registry.get(execution_id)
        if live is None:
            return
        self._registry.cancel(live)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                live.finished.wait(),
                self._registry.kill_grace_seconds + CANCEL_RECORD_MARGIN_SECONDS,
            )

    async def _controllable(self, principal: Principal, execution_id: str) -> LiveExecution:
        live = self._registry.get(execution_id)
        if (
            live is not None
            and not live.has_exited
            and (live.owner == principal.name or principal.is_admin)
        ):
            return live  # keystrokes take this path: no database read per key
        record = await self._reader.readable(principal, execution_id)
        require_control(principal, record, "drive")
        live = self._registry.get(execution_id)
        if live is None or live.has_exited:
            raise ConflictError(f"execution {execution_id} is not running")
        return live
