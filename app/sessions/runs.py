"""`POST /v1/sessions/{id}/run`: the streaming runner's use-case. The runner's own checks, then
the execution (`ExecutionService.start_streamed`: policy, approvals, a foreground run in the
session), then its output as NDJSON items (`app/sessions/runner.py`)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

from app.core.auth import Principal
from app.core.errors import NotFoundError
from app.executions import ExecutionService
from app.executions.ports import CallerGone
from app.executions.registry import LiveExecution, Registry
from app.schemas import RunRequest
from app.sessions.runner import (
    FinishedSource,
    LiveSource,
    RunSource,
    RunStatus,
    check_run,
    ndjson_items,
)
from app.sessions.service import SessionService

logger = logging.getLogger("shellgate.sessions")


@dataclass
class RunStream:
    execution_id: str
    items: AsyncIterator[bytes]


class SessionRuns:
    def __init__(
        self, sessions: SessionService, executions: ExecutionService, registry: Registry
    ) -> None:
        self._sessions = sessions
        self._executions = executions
        self._registry = registry

    async def run(
        self,
        principal: Principal,
        session_id: str,
        body: RunRequest,
        *,
        caller_gone: CallerGone | None = None,
    ) -> RunStream:
        """Everything that can refuse the call does so before the response starts; a caller
        that leaves while its command awaits approval withdraws it (`caller_gone`)."""
        principal.require("agent", "admin")
        record = await self._sessions.usable(principal, session_id)
        deadline_ms = check_run(body.command, body.timeout_ms, record.timeout_ms)
        execution_id, live = await self._executions.start_streamed(
            principal,
            session_id=session_id,
            command=body.command,
            timeout_seconds=deadline_ms / 1000,
            sandbox=body.sandbox,
            caller_gone=caller_gone,
        )
        source: RunSource
        if live is not None:
            source = LiveSource(live)
        else:
            source = await self._finished_source(principal, execution_id)
        return RunStream(execution_id, self._streamed(source, live))

    async def _streamed(
        self, source: RunSource, live: LiveExecution | None
    ) -> AsyncIterator[bytes]:
        try:
            async for line in ndjson_items(source):
                yield line
        finally:
            # The stream borrows the call: a client that goes away
            # takes its command with it.
            if live is not None and not live.has_exited:
                logger.info("runner client of %s went away: cancelling it", live.id)
                self._registry.cancel(live)

    async def _finished_source(self, principal: Principal, execution_id: str) -> FinishedSource:
        record = await self._executions.authorize_read(principal, execution_id)
        log = await self._executions.open_finished_log(execution_id)
        if log is None:
            raise NotFoundError(f"the output of execution {execution_id} is gone")
        return FinishedSource(log, RunStatus(record.exit_code, record.signal, record.timed_out))
