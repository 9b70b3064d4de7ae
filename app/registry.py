"""Live executions: the in-memory side of the registry.

A `LiveExecution` is fed by its process's pump thread (log + inline window) and woken on the
event loop, where HTTP waiters and WebSocket viewers wait for new bytes. The `Registry` holds the
live ones, the global background-job cap, and the clock of a process's end: its deadline and the
SIGTERM → grace → SIGKILL escalation.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from app.artifact_log import ArtifactLog
from app.confinement import Unit
from app.models import Execution, ExecutionMode
from app.output import OutputSink, OutputSummary
from app.process import ExitStatus, OutputStream, RunningProcess
from app.result_text import OUTPUT_CUT_NOTICES
from app.storage import OUTPUT_STORAGE_FULL_NOTICE, is_storage_full

# The most bytes the inline window takes in one call (see accept_output).
SINK_SLICE_BYTES = 32 * 1024


class LiveExecution:
    def __init__(
        self,
        execution_id: str,
        *,
        owner: str,
        log: ArtifactLog,
        sink: OutputSink,
        loop: asyncio.AbstractEventLoop,
        on_storage_full: Callable[[], None] | None = None,
    ) -> None:
        self.id = execution_id
        self.owner = owner
        self.log = log
        self.sink = sink
        self.mode = ExecutionMode.foreground
        self.process: RunningProcess | None = None
        # Its confinement: the limits, the evidence of a hit, the whole-tree kill.
        self.unit: Unit | None = None
        self.started_monotonic = time.monotonic()
        self.wall_time_ms: float | None = None
        self.timed_out = False
        self.cancelled = False
        self.lost = False
        self.holds_job_slot = False
        self.notices: list[str] = []
        # The database row as inserted, then as finished: lets the waiting caller answer
        # without reading it back.
        self.record: Execution | None = None
        self._loop = loop
        self._lock = threading.Lock()
        self._on_storage_full = on_storage_full
        # Set when a write to the log failed for lack of space: later output is dropped (the
        # log keeps an exact prefix, never a stream with a hole) and the record says so.
        self.storage_full = False
        self._wake_pending = False
        self._changed = asyncio.Event()
        self.exited: asyncio.Future[ExitStatus] = loop.create_future()
        # Set once the terminal record is in the database: waiters then read it from there.
        self.finished = asyncio.Event()

    # --- called from the pump thread ---------------------------------------------------------

    def accept_output(self, data: bytes, stream: OutputStream) -> None:
        with self._lock:
            if self.storage_full:
                return  # keep draining the pipe so the command is not blocked
            try:
                self.log.append(data, stream)
            except OSError as error:
                if not is_storage_full(error):
                    raise
                self._storage_ran_out()
                return
            # The inline window's work (decoding, sanitising) holds the interpreter for as
            # long as each call runs: in slices, the event loop gets it back between them.
            for start in range(0, len(data), SINK_SLICE_BYTES):
                self.sink.feed(data[start : start + SINK_SLICE_BYTES])
            schedule = not self._wake_pending
            self._wake_pending = True
        if schedule:
            self._loop.call_soon_threadsafe(self._wake)

    def accept_exit(self, status: ExitStatus) -> None:
        self.wall_time_ms = (time.monotonic() - self.started_monotonic) * 1000
        if status.output_cut is not None:
            # Before the exit is settled on the loop, where the notices are read.
            self.notices.append(OUTPUT_CUT_NOTICES[status.output_cut.value])
        with self._lock:
            # Settle bytes the sink held back (a trailing \r, half a character, an open escape).
            self.sink.flush()
        try:
            self.log.finish()
        except OSError as error:
            if not is_storage_full(error):
                raise
            with self._lock:
                self._storage_ran_out()
        self._loop.call_soon_threadsafe(self._settle_exit, status)

    def _storage_ran_out(self) -> None:
        """Under the lock, from the pump thread."""
        if self.storage_full:
            return
        self.storage_full = True
        self.notices.append(OUTPUT_STORAGE_FULL_NOTICE)
        if self._on_storage_full is not None:
            self._on_storage_full()

    # --- event loop side ----------------------------------------------------------------------

    def _wake(self) -> None:
        with self._lock:
            self._wake_pending = False
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _settle_exit(self, status: ExitStatus) -> None:
        if not self.exited.done():
            self.exited.set_result(status)
        self._wake()

    def summary(self, notice: str | None = None) -> OutputSummary:
        with self._lock:
            return self.sink.summary(notice)

    @property
    def total_bytes(self) -> int:
        return self.log.total_bytes

    @property
    def has_exited(self) -> bool:
        return self.exited.done()

    async def wait_for_bytes_after(self, offset: int, within: float | None = None) -> None:
        """Return once the log holds more than `offset` bytes, the process exited, or `within`
        seconds passed."""
        deadline = None if within is None else time.monotonic() + within
        while self.log.total_bytes <= offset and not self.exited.done():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return
            changed = self._changed
            try:
                await asyncio.wait_for(changed.wait(), remaining)
            except TimeoutError:
                return


class Registry:
    def __init__(self, max_jobs: int, *, kill_grace_seconds: float) -> None:
        self.max_jobs = max_jobs
        self.kill_grace_seconds = kill_grace_seconds
        self.live: dict[str, LiveExecution] = {}
        self._running_jobs = 0

    @property
    def running_jobs(self) -> int:
        return self._running_jobs

    @property
    def at_capacity(self) -> bool:
        return self._running_jobs >= self.max_jobs

    def reserve_job_slot(self, live: LiveExecution | None = None) -> bool:
        # Only the event loop calls this, so check-and-increment is atomic without a lock.
        if self.at_capacity:
            return False
        self._running_jobs += 1
        if live is not None:
            live.holds_job_slot = True
        return True

    def release_job_slot(self, live: LiveExecution | None = None) -> None:
        if live is not None:
            if not live.holds_job_slot:
                return
            live.holds_job_slot = False
        self._running_jobs = max(0, self._running_jobs - 1)

    def add(self, live: LiveExecution) -> None:
        self.live[live.id] = live

    def get(self, execution_id: str) -> LiveExecution | None:
        return self.live.get(execution_id)

    def remove(self, execution_id: str) -> None:
        self.live.pop(execution_id, None)

    # --- ending a process ---------------------------------------------------------------------

    def arm_deadline(self, live: LiveExecution, seconds: float | None) -> None:
        """Time the execution out after `seconds` (None: no deadline)."""
        if seconds is None:
            return

        def expire() -> None:
            if live.has_exited or live.cancelled:
                return
            live.timed_out = True
            self.terminate(live)

        handle = asyncio.get_running_loop().call_later(seconds, expire)
        live.exited.add_done_callback(lambda _: handle.cancel())

    def cancel(self, live: LiveExecution) -> None:
        live.cancelled = True
        self.terminate(live)

    def terminate(self, live: LiveExecution, grace: float | None = None) -> None:
        """SIGTERM the whole group, then SIGKILL after the grace period if it still runs."""
        process = live.process
        if process is None or live.has_exited:
            return
        process.terminate_group()

        def escalate() -> None:
            if not live.has_exited:
                process.kill_group()

        delay = self.kill_grace_seconds if grace is None else grace
        handle = asyncio.get_running_loop().call_later(delay, escalate)
        live.exited.add_done_callback(lambda _: handle.cancel())
