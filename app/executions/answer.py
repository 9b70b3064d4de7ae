"""What a started call answers its caller: the finished record (200), or, when it runs longer
than the auto-background threshold (or is a job from the start), a 202 with its output so far
while it carries on as a background job. When the server starts stopping meanwhile, the caller
is answered at once, as if backgrounded: it reads the recorded end later.

That stopping answer is the state at the moment the stop reached this call: `running`, with the
output so far. It is captured before any await, because the stop itself ends the command and
records it `lost` (in the database and in `live.record`) while the answer is being built; an
answer read back from the row would say `running` or `lost` depending on which won."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from app.executions.context import Context
from app.executions.launch import Launch
from app.executions.registry import LiveExecution
from app.executions.result_text import LOST_NOTICE, STOPPING_NOTICE, backgrounded_text
from app.executions.views import ExecutionReader, to_public
from app.schemas import ExecutionPublic
from app.store import crud
from app.store.models import Execution, ExecutionMode, ExecutionState

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

    async def answer(self, launch: Launch, *, caller_left: bool = False) -> Outcome:
        """`caller_left`: nobody waits for this foreground run any more (its caller left as it
        started): it is backgrounded now rather than at the threshold, under the cap; at the
        cap it is followed to its end, as the caller would have."""
        live = launch.live
        if launch.foreground_wait == 0:
            return Outcome(202, await self._backgrounded(live, launch.notices))
        waits = self._changes.wait_unless_stopping
        within = 0.0 if caller_left else launch.foreground_wait
        # A stop's drain waits for this (bounded): a command that ends meanwhile answers 200.
        with self._changes.awaiting_command_end():
            ended = await waits(self._finished_or_idle(launch), within)
        if not (ended and live.finished.is_set()):
            # No await between the check and the copy: see the module's docstring.
            stopped_first = self._changes.stopping
            at_stop = _running_copy(live.record) if stopped_first else None
            if launch.pending is not None:
                # An answer before the end names the id: the row must exist by then.
                await launch.pending.ensure_written()
            if self._changes.stopping:
                if not stopped_first:
                    if live.finished.is_set():
                        # The stop came during that write, and so did the recorded end.
                        record = live.record or await self._reader.record(live.id)
                        return Outcome(200, to_public(record))
                    at_stop = _running_copy(live.record)
                return Outcome(202, await self._stopping(live, launch.notices, at_stop))
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
                at_stop = _running_copy(live.record)
                return Outcome(202, await self._stopping(live, launch.notices, at_stop))
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

    async def _stopping(
        self, live: LiveExecution, notices: list[str], at_stop: Execution | None
    ) -> ExecutionPublic:
        if at_stop is None:
            # No copy in memory (an approved call updated its row in place): the row, as it
            # was while the command ran, whatever the stop wrote into it since.
            at_stop = _running_copy(await self._reader.record(live.id))
        return await self._backgrounded(live, [*notices, STOPPING_NOTICE], at_stop)

    async def _backgrounded(
        self, live: LiveExecution, notices: list[str], record: Execution | None = None
    ) -> ExecutionPublic:
        if record is None:
            record = await self._reader.record(live.id)
        public = to_public(record, live)
        public.notices = [*public.notices, *(n for n in notices if n not in public.notices)]
        public.text = backgrounded_text(
            preview=live.summary().output[-PREVIEW_CHARS:], notices=notices, execution_id=live.id
        )
        return public


# What the end of a run writes into its row; a stopping answer shows the row without them.
_ENDED_COLUMNS: dict[str, Any] = {
    "state": ExecutionState.running.value,
    "exit_code": None,
    "signal": None,
    "timed_out": False,
    "wall_time_ms": None,
    "finished_at": None,
}


def _running_copy(record: Execution | None) -> Execution | None:
    """A detached copy of a running execution's row as it stood before its end was recorded
    (None stays None). The copy is the answer: later writes to `record` do not reach it."""
    if record is None:
        return None
    row = crud.execution_row(record)
    if ExecutionState(row["state"]).is_terminal:
        notices = [notice for notice in json.loads(row["notices"]) if notice != LOST_NOTICE]
        row.update(_ENDED_COLUMNS, notices=json.dumps(notices), text=None, text_after_output=None)
    return Execution(**row)
