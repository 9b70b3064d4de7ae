"""A started execution's life after the spawn: wait for its exit, let its session settle, write
the terminal record and free its place; the terminal record of one that never ran; and the
server's stop, which ends every running command. Deadlines and the kill escalation are the
registry's (`Registry.arm_deadline`, `terminate`)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

import anyio.to_thread

from app.confinement import Confinement, Unit
from app.core.blocking import run_blocking
from app.core.errors import DatabaseUnavailableError
from app.executions.context import Context
from app.executions.pending_record import PendingRecord
from app.executions.ports import SessionCall
from app.executions.registry import LiveExecution
from app.executions.result_text import CANCELLED_NOTICE, LOST_NOTICE, final_text, timeout_notice
from app.executions.timeouts import ResolvedTimeout
from app.observability.events import execution_event
from app.observability.tracing import RunSpan
from app.output.window import truncation_footer
from app.process import ExitStatus
from app.sandbox.host_list import hosts_of
from app.sandbox.refusal import egress_refusal_notice, refusal_notice
from app.store import crud
from app.store.db import DATABASE_THREADS
from app.store.models import Execution, ExecutionState

logger = logging.getLogger("shellgate.executions")

FINAL_WRITE_ATTEMPTS = 5  # for errors other than an unreachable database
FINAL_WRITE_RETRY_CAP = 5.0  # seconds at most between tries while the database is unreachable
KEPT_UNITS_BACK_SECONDS = 5.0  # at most, for a session's end to see every kept unit

# Writes an execution's terminal values (blocking, in a worker thread); True if written.
FinalWrite = Callable[[dict[str, Any]], bool]


class Lifecycle:
    def __init__(self, context: Context, keeps_daemons: Callable[[], bool]) -> None:
        self._settings = context.settings
        self._db = context.db
        self._registry = context.registry
        self._metrics = context.metrics
        self._changes = context.changes
        self._confinement = context.confinement
        self._completion = context.completion
        self._sandbox = context.sandbox
        # The policy's `keep_daemons`, read when each run ends (the policy may change).
        self._policy_keeps_daemons = keeps_daemons
        # Units whose run ended while `keep_daemons` let its processes go on: removed once
        # empty, killed when the server stops.
        self._kept_units: list[Unit] = []
        # Run ends whose closer took the kept units off that list and has not given back
        # what is still kept (see `end_session`).
        self._kept_out = 0
        self._kept_all_back = asyncio.Event()
        self._kept_all_back.set()
        self._tasks: set[asyncio.Task[Any]] = set()

    def watch(
        self,
        live: LiveExecution,
        limit: ResolvedTimeout,
        session_call: SessionCall | None,
        run_span: RunSpan | None = None,
        pending: PendingRecord | None = None,
    ) -> None:
        """Arm the deadline and supervise the execution until its terminal record is written.
        `pending`: its row is only an intent so far (pending_record.py). As in
        `finish_without_process`, only a terminal write that took reports the end (metrics,
        `finished` line, delivery): one that lost to a record already written (`lost` by the
        replicas after a fence, a cancel's), or failed for good (not for an unreachable
        database: that end waits for it), reports nothing; the run's span still ends, without
        a state."""
        self._registry.arm_deadline(live, limit.seconds)
        self._track(self._supervise(live, limit, session_call, run_span, pending))

    async def _supervise(
        self,
        live: LiveExecution,
        limit: ResolvedTimeout,
        session_call: SessionCall | None,
        run_span: RunSpan | None,
        pending: PendingRecord | None,
    ) -> None:
        status = await live.exited
        if (hosts := hosts_of(live.sandbox)) is not None and self._sandbox is not None:
            # The sandbox is gone with its command: so is the proxy's one client.
            refused = await self._sandbox.egress.close(live.id)
            if refused:
                live.notices.append(egress_refusal_notice(refused, hosts))
        write: FinalWrite = functools.partial(self._finish_row, live.id)
        retry = write
        if pending is not None and await pending.take_over_for_the_end():
            # No `running` row was written: the end inserts the whole row.
            write, retry = pending.insert_final, pending.insert_or_finish
        close_unit = self._unit_closer(live, status)
        written: bool | None = None
        if session_call is None:
            # The unit's end and the terminal record in one worker-thread hop.
            state, values, written = await run_blocking(
                functools.partial(self._end_and_record, live, status, limit, close_unit, write)
            )
        else:
            # Before the record turns terminal: whoever sees the end and calls again in the
            # session must find the state this call saved. The unit's end, the state and the
            # record in one worker-thread hop, as a foreground call's end (three hops before:
            # bench/PROFILE.md, "One hop at a session call's end").
            ended_in: str | None = None
            try:
                settle = session_call.settle_plan(live)
                state, values, written, ended_in = await run_blocking(
                    functools.partial(
                        self._end_settle_and_record, live, status, limit, close_unit, write, settle
                    )
                )
            finally:
                try:
                    await session_call.settled(ended_in)
                except Exception:
                    logger.exception("session bookkeeping failed after %s", live.id)
        if close_unit is not None:
            self._kept_units.extend(close_unit.still_kept)
            if close_unit.took_kept:
                self._kept_out -= 1
                if self._kept_out == 0:
                    self._kept_all_back.set()
        try:
            if written is None:
                written = await self._write_final(live.id, values, retry)
            if written and live.record is not None:
                # The waiting caller answers from this copy: one database read fewer per call.
                # A detached copy no session will ever flush: its values go straight into the
                # instance dict, where the mapped attributes read them, without the ORM's
                # change tracking (a twentieth of a foreground call's CPU when set one by one).
                vars(live.record).update(values)
            else:
                live.record = None
        finally:
            self._registry.release_job_slot(live)
            self._registry.remove(live.id)
            live.finished.set()
            self._changes.notify(live.id)
            if close_unit is not None:
                # After the waiting caller's wake-up, queued by `finished.set()` above: its
                # answer is built and sent before the next standby's bash and bwrap start
                # taking the other core (bench/PROFILE.md, "The sandboxed call's end").
                asyncio.get_running_loop().call_soon(self._confinement.standby_wanted)
            if written:
                self._completion.ended(live.id, live.notify_url)
                output_bytes = values.get("total_bytes", 0)
                self._finished(live.id, live.owner, state, values, output_bytes, run_span)
            elif run_span is not None:
                # The record is another writer's (or none): the span claims no state of it.
                run_span.end()

    def _end_and_record(
        self,
        live: LiveExecution,
        status: ExitStatus,
        limit: ResolvedTimeout,
        close_unit: _UnitCloser | None,
        write: FinalWrite,
    ) -> tuple[ExecutionState, dict[str, Any], bool | None]:
        """In a worker thread: end the unit, then try the terminal record once (None: not
        written, `_write_final` retries on the loop)."""
        live.finish_log()
        limit_notice = close_unit.run() if close_unit is not None else None
        state, values = self._final_values(live, status, limit, limit_notice)
        try:
            written: bool | None = write(values)
        except Exception:
            written = None
        return state, values, written

    def _end_settle_and_record(
        self,
        live: LiveExecution,
        status: ExitStatus,
        limit: ResolvedTimeout,
        close_unit: _UnitCloser | None,
        write: FinalWrite,
        settle: Callable[[], str | None],
    ) -> tuple[ExecutionState, dict[str, Any], bool | None, str | None]:
        """In a worker thread, a session call's end: the unit, then the session's state, then
        one try of the record, unless the session's cwd must follow the call first (then the
        loop writes it after `settled`)."""
        live.finish_log()
        limit_notice = close_unit.run() if close_unit is not None else None
        ended_in: str | None = None
        try:
            ended_in = settle()
        except Exception:
            logger.exception("session bookkeeping failed after %s", live.id)
        state, values = self._final_values(live, status, limit, limit_notice)
        written: bool | None = None
        if ended_in is None:
            try:
                written = write(values)
            except Exception:
                written = None
        return state, values, written, ended_in

    def _finish_row(self, execution_id: str, values: dict[str, Any]) -> bool:
        """The usual end: the `running` row turns terminal (blocking)."""
        return self._db.run_in_transaction(
            crud.finish_execution, execution_id=execution_id, values=values
        )

    def _final_values(
        self,
        live: LiveExecution,
        status: ExitStatus,
        limit: ResolvedTimeout,
        limit_notice: str | None,
    ) -> tuple[ExecutionState, dict[str, Any]]:
        """The terminal state and the record's final values."""
        if live.lost:
            state = ExecutionState.lost
            notice: str | None = None
        elif limit_notice is not None:
            state, notice = ExecutionState.failed, None
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
        lost = [live.lost_notice or LOST_NOTICE] if live.lost else []
        notices = [*live.notices, *lost]
        if limit_notice is not None and not live.lost:
            notices.append(limit_notice)
        if state is ExecutionState.failed and live.sandbox is not None:
            refused = refusal_notice(live.sandbox, summary.output)
            if refused is not None:
                notices.append(refused)
        values["notices"] = json.dumps(notices)
        values["text"] = final_text(
            body=summary.output,
            wall_time_ms=live.wall_time_ms,
            notices=notices,
            state=state,
            exit_code=values["exit_code"],
            footer=truncation_footer(summary, live.id),
        )
        return state, values

    def _finished(
        self,
        execution_id: str,
        owner: str,
        state: ExecutionState,
        values: dict[str, Any],
        output_bytes: int,
        run_span: RunSpan | None = None,
    ) -> None:
        """The metrics, the run span and the `finished` line of a terminal execution."""
        wall_time_ms = values.get("wall_time_ms")
        seconds = None if wall_time_ms is None else wall_time_ms / 1000
        self._metrics.observe_finished(state.value, seconds, output_bytes)
        if run_span is not None:
            run_span.end(state=state.value, exit_code=values.get("exit_code"))
        execution_event(
            "finished",
            execution_id=execution_id,
            owner=owner,
            state=state.value,
            exit_code=values.get("exit_code"),
            signal=values.get("signal"),
            duration_ms=None if wall_time_ms is None else round(wall_time_ms),
            output_bytes=output_bytes,
        )

    def _unit_closer(self, live: LiveExecution, status: ExitStatus) -> _UnitCloser | None:
        """After the leader's exit: what ends the run's unit (None without one). Decided on
        the loop: the policy's `keep_daemons` and the kept units are the loop's."""
        unit = live.unit
        if unit is None:
            return None
        ended_by_us = live.timed_out or live.cancelled or live.lost
        keep_daemons = self._policy_keeps_daemons() and not ended_by_us
        # Units that kept daemons of earlier runs: dropped here once they are empty.
        kept, self._kept_units = self._kept_units, []
        if kept:
            self._kept_out += 1
            self._kept_all_back.clear()
        return _UnitCloser(self._confinement, unit, live, status, kept, keep_daemons, ended_by_us)

    async def end_session(self, session_id: str) -> None:
        """A deleted session's calls are over (its `delete` waited for them); what they left
        running under `keep_daemons` ends with it (docs/operations.md#confinement)."""
        # Units a closer holds come back to the list within a thread hop: wait for them, so
        # none of this session's is missed (bounded: a closer that failed never gives back).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(KEPT_UNITS_BACK_SECONDS):
                while self._kept_out > 0:
                    await self._kept_all_back.wait()
        ending = [unit for unit in self._kept_units if unit.session_id == session_id]
        if not ending:
            return
        self._kept_units = [unit for unit in self._kept_units if unit.session_id != session_id]
        for unit in ending:
            await anyio.to_thread.run_sync(
                functools.partial(self._confinement.close_unit, unit, kill=True)
            )

    async def _write_final(
        self, execution_id: str, values: dict[str, Any], write: FinalWrite
    ) -> bool:
        # The record is the only way anyone learns the result: retry a failing write a few
        # times, and an unreachable database for as long as this server runs. Giving up (after
        # ten minutes, until 2026-12-07) left a finished command `running` in the record, its
        # waiters unanswered and its webhook unsent, until the next restart called it `lost`;
        # waiting costs one sleeping task per ended command, and a server stopped meanwhile
        # leaves the end to the next start's recovery, as before.
        attempt = 0
        while True:
            try:
                return await DATABASE_THREADS.run(functools.partial(write, values))
            except DatabaseUnavailableError:
                if attempt == 0:
                    logger.error("database unreachable: the end of %s waits for it", execution_id)
            except Exception:
                logger.exception("could not record the end of %s (try %d)", execution_id, attempt)
                if attempt >= FINAL_WRITE_ATTEMPTS - 1:
                    return False
            attempt += 1
            await asyncio.sleep(min(FINAL_WRITE_RETRY_CAP, 0.2 * attempt))

    async def finish_without_process(
        self, record: Execution, state: ExecutionState, *, notice: str | None = None
    ) -> None:
        """The terminal record of an execution that never ran (rejected, cancelled, failed to
        start after its approval). A terminal record already written (by another replica, or
        another path here) stays, and so does what its writer reported: a write that lost
        reports nothing (no metrics, no `finished` line, no delivery), so an execution is
        counted and delivered once, in the state it is recorded in. Waits here are still
        woken: their record has ended."""
        notices = json.loads(record.notices)
        if notice:
            notices.append(notice)
        text = final_text(
            body="", wall_time_ms=None, notices=notices, state=state, exit_code=None, footer=None
        )
        values: dict[str, Any] = {
            "state": state.value,
            "finished_at": datetime.now(UTC),
            "notices": json.dumps(notices),
            "pending_request": None,
            "output": "",
            "text": text,
        }
        written = await self._db.run(crud.finish_execution, execution_id=record.id, values=values)
        self._changes.notify(record.id)
        if written:
            self._completion.ended(record.id, record.notify_url)
            self._finished(record.id, record.owner, state, values, 0)

    # --- the server's stop --------------------------------------------------------------------

    def begin_stop(self, drain: float) -> None:
        """The server got SIGTERM/SIGINT: new work is refused at once; foreground calls whose
        command ends within `drain` seconds answer as they would have (a quick command caught
        by a rolling restart is not cut), then `begin_shutdown`. A stop the drain left no
        call to wait for goes on at once."""
        if self._changes.refusing:
            return
        # Now, not when the drain's task first runs: no request may slip in between.
        self._changes.refuse_new_work()
        self._track(self._drain_then_shut_down(drain))

    async def _drain_then_shut_down(self, drain: float) -> None:
        await self._changes.drain(drain)
        self.begin_shutdown()

    def begin_shutdown(self) -> None:
        """The drain is over (or there was none): answer every waiting caller now with the current
        state, and stop every running command (group TERM, then KILL after a grace bounded by
        the shutdown grace). Their records end `lost` with a notice once the pump has read all
        their output, so the logs are complete. Pending approvals stay pending in the database
        and are restored by the next start."""
        if not self._changes.stopping:
            self._changes.stop()
            logger.info("shutting down: stopping %d running commands", len(self._registry.live))
        # Again from `shutdown`: a command whose spawn was in flight at the signal is caught.
        for live in list(self._registry.live.values()):
            if not live.lost:
                live.lost = True
                self._registry.terminate(live, grace=self._stop_grace)

    def fence(self, notice: str) -> int:
        """This replica lost its lease on the cluster (Cluster.fence_if_due): end every running
        command now (group TERM, the kill grace, KILL), recorded `lost` with `notice`, before
        the other replicas record them so and free their job slots. How many were running."""
        fenced = 0
        for live in list(self._registry.live.values()):
            if not live.lost:
                live.lost, live.lost_notice = True, notice
                self._registry.terminate(live, grace=self._settings.kill_grace_seconds)
                fenced += 1
        return fenced

    @property
    def _stop_grace(self) -> float:
        # TERM → KILL within the first quarter of the shutdown grace: the rest is for the pumps
        # to drain and the records to be written.
        return min(self._settings.kill_grace_seconds, self._settings.shutdown_grace / 4)

    async def shutdown(self, within: float | None = None) -> None:
        """Stopping the server ends its commands: their groups are killed and they read `lost`.
        Waits up to `within` seconds (default: the shutdown grace) for their records."""
        self.begin_shutdown()
        lives = list(self._registry.live.values())
        waits = [asyncio.ensure_future(live.finished.wait()) for live in lives]
        if waits:
            _, pending = await asyncio.wait(waits, timeout=within or self._settings.shutdown_grace)
            for wait in pending:
                wait.cancel()
            if pending:
                logger.error("%d commands were not recorded before the shutdown", len(pending))
        for task in list(self._tasks):
            task.cancel()
        # Kept daemons, and the tree of any run whose end was not settled in time, go too.
        units = [live.unit for live in lives if live.unit is not None]
        kept, self._kept_units = self._kept_units, []
        for unit in [*kept, *units]:
            await anyio.to_thread.run_sync(
                functools.partial(self._confinement.close_unit, unit, kill=True)
            )
        await anyio.to_thread.run_sync(self._confinement.close)

    def _track(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


class _UnitCloser:
    """The end of a run's unit, in a worker thread: the notice of a limit that ended the run
    (from the backend's evidence), then the end of everything the run started unless the policy
    keeps daemons (a timeout, a cancel or a server stop always ends them). The units it could
    not remove (`still_kept`) go back to the lifecycle's kept units, on the loop."""

    def __init__(
        self,
        confinement: Confinement,
        unit: Unit,
        live: LiveExecution,
        status: ExitStatus,
        kept: list[Unit],
        keep_daemons: bool,
        ended_by_us: bool,
    ) -> None:
        self._confinement = confinement
        self._unit = unit
        self._live = live
        self._status = status
        self._kept = kept
        self._keep_daemons = keep_daemons
        self._ended_by_us = ended_by_us
        self.still_kept: list[Unit] = []
        self.took_kept = bool(kept)

    def run(self) -> str | None:
        try:
            live = self._live
            notice = self._unit.evidence(self._status, lambda: live.summary().output[-4096:])
            confinement = self._confinement
            self.still_kept = [
                old for old in self._kept if not confinement.close_unit(old, kill=False)
            ]
            # A run that ended by itself: its cgroup (if any) holds whatever it left behind.
            closed = confinement.close_unit(
                self._unit,
                kill=not (self._keep_daemons and notice is None),
                sweep=self._ended_by_us or notice is not None,
                # Sandboxed, bwrap's monitor was the leader: its exit ended the PID
                # namespace (its init dies with it, and every process inside with the init).
                ending=live.sandbox is not None,
                # The next standby is made once the answer is out (`_supervise`): made
                # here, its bwrap competed with the record's write and the answer.
                replace_standby=False,
            )
        except Exception:
            logger.exception("could not end the processes of %s", self._live.id)
            self.still_kept = [*self._kept, self._unit]
            return None
        if not closed:
            self.still_kept.append(self._unit)
        return notice
