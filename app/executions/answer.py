"""What a started call answers its caller: the finished record (200), or, when it runs longer
than the auto-background threshold (or is a job from the start), a 202 with its output so far
while it carries on as a background job. When the server starts stopping meanwhile, the caller
is answered at once, as if backgrounded: it reads the recorded end later."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from app import crud
from app.executions.context import Context
from app.executions.launch import Launch
from app.executions.views import ExecutionReader, to_public
from app.models import ExecutionMode
from app.registry import LiveExecution
from app.result_text import STOPPING_NOTICE, backgrounded_text
from app.schemas import ExecutionPublic

# The output a backgrounded answer previews.
PREVIEW_CHARS = 4096


@dataclass
class Outcome:
    """What a submit answers: the HTTP status (200 done, 202 job or pending) and the record."""

    status_code: int
    execution: ExecutionPublic


class Answers:
    def __init__(self, context: Context, reader: ExecutionReader) -> None:
        self._db = context.db
        self._registry = context.registry
        self._metrics = context.metrics
        self._changes = context.changes
        self._reader = reader

    async def answer(self, launch: Launch) -> Outcome:
        live = launch.live
        if launch.foreground_wait == 0:
            return Outcome(202, await self._backgrounded(live, launch.notices))
        waits = self._changes.wait_unless_stopping
        ended = await waits(self._finished_or_idle(launch), launch.foreground_wait)
        if not (ended and live.finished.is_set()):
            if launch.pending is not None:
                # An answer before the end names the id: the row must exist by then.
                await launch.pending.ensure_written()
            if self._changes.stopping:
                return Outcome(202, await self._stopping(live, launch.notices))
            idle = launch.idle
            fell_silent = idle is not None and idle.fired.is_set() and not live.has_exited
            if idle is not None and fell_silent and idle.notice not in live.notices:
                # Kept on the record too: whoever reads it later learns why it went on alone.
                live.notices.append(idle.notice)
                launch.notices = [*launch.notices, idle.notice]
            if not live.has_exited and await self._registry.claim_job_slot(live):
                live.mode = ExecutionMode.job
                await self._db.run(
                    crud.update_execution,
                    execution_id=live.id,
                    values={"mode": ExecutionMode.job.value},
                )
                self._metrics.auto_backgrounded.inc()
                return Outcome(202, await self._backgrounded(live, launch.notices))
            # No room under the cap: keep the caller waiting rather than exceed it.
            if not await waits(live.finished.wait(), None):
                return Outcome(202, await self._stopping(live, launch.notices))
        record = live.record or await self._reader.record(live.id)
        return Outcome(200, to_public(record))

    @staticmethod
    async def _finished_or_idle(launch: Launch) -> None:
        """Until the record is terminal, or (with an idle timeout) the command fell silent."""
        live, idle = launch.live, launch.idle
        if idle is None:
            await live.finished.wait()
            return
        waits = {
            asyncio.ensure_future(live.finished.wait()),
            asyncio.ensure_future(idle.fired.wait()),
        }
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()

    async def _stopping(self, live: LiveExecution, notices: list[str]) -> ExecutionPublic:
        return await self._backgrounded(live, [*notices, STOPPING_NOTICE])

    async def _backgrounded(self, live: LiveExecution, notices: list[str]) -> ExecutionPublic:
        public = to_public(await self._reader.record(live.id), live)
        public.notices = [*public.notices, *(n for n in notices if n not in public.notices)]
        public.text = backgrounded_text(
            preview=live.summary().output[-PREVIEW_CHARS:], notices=notices, execution_id=live.id
        )
        return public
