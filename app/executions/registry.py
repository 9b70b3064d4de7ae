"""Live executions: the in-memory side of the registry.

A `LiveExecution` is fed on the event loop by its process's reader (log + inline window), and
wakes the HTTP waiters and WebSocket viewers waiting there for new bytes. The `Registry` holds the
live ones, the global background-job cap, and the clock of a process's end: its deadline and the
SIGTERM → grace → SIGKILL escalation.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import operator
import threading
import time
from collections.abc import Callable
from typing import Protocol

from app.confinement import Unit
from app.executions.result_text import OUTPUT_CUT_NOTICES, OUTPUT_LOG_FAILED_NOTICE
from app.output.artifact_log import ArtifactLog
from app.output.follower import SharedReads
from app.output.live_edge import RecentOutput
from app.output.log_writer import (
    LOG_WRITER,
    OFFLOADED_BYTES,
    QUEUED_MAX_BYTES,
    QUEUED_RESUME_BYTES,
)
from app.output.sink_worker import SINK_WORKER, WINDOW_PROCESS
from app.output.window import OutputSink, OutputSummary
from app.process import ExitStatus, OutputStream, RunningProcess
from app.process.fence_watch import FenceWatch
from app.sandbox import SandboxProfile
from app.store.models import Execution, ExecutionMode
from app.store.storage import OUTPUT_STORAGE_FULL_NOTICE, is_storage_full

logger = logging.getLogger("shellgate.output")

# A chunk at most this large is cleaned on the loop whatever its bytes (≈ 0.1 ms at worst);
# larger ones only when ASCII (no UTF-8 decoding with replacement: ≈ 1 GB/s). Sending ASCII
# floods to the window process instead cost ×1.5 the CPU per MB of a pipe stream (the window
# pickled both ways per turn; bench/PROFILE.md, "The stream path").
INLINE_FEED_BYTES = 4 * 1024
# The backlog one execution may leave to the sink worker before its reader pauses, and the
# level at which reading resumes.
SINK_BACKLOG_MAX_BYTES = 2 * 1024 * 1024
SINK_RESUME_BYTES = 512 * 1024
# The most bytes the window takes per hold of the lock on the worker's thread.
SINK_SLICE_BYTES = 32 * 1024
# From this size on, a turn's bytes are cleaned in the window process
# (app/output/window_process.py): the copies there and back cost less than a tenth of the cleaning.
WINDOW_PROCESS_MIN_BYTES = 32 * 1024
# The latest output kept in memory for viewers at the live edge (app/output/live_edge.py): eight
# reads' worth (`app.executions.viewer.READ_BYTES`), so a viewer that waited for a burst to
# gather a full read, or fell a few reads behind a fast writer while its frames were sent, still
# finds it there (no file read, no thread hop: the hop cost more than the framing).
RECENT_OUTPUT_BYTES = 2 * 1024 * 1024


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
        # Never further back than the log keeps: a viewer meets the same gaps either way.
        self.recent = RecentOutput(min(RECENT_OUTPUT_BYTES, log.kept_tail_bytes))
        # Reads of the log shared by its followers: one read and encoding per batch, not one
        # per viewer (app/output/follower.py).
        self.shared_reads = SharedReads()
        self.mode = ExecutionMode.foreground
        self.process: RunningProcess | None = None
        # Its confinement: the limits, the evidence of a hit, the whole-tree kill.
        self.unit: Unit | None = None
        self.started_monotonic = time.monotonic()
        self.wall_time_ms: float | None = None
        self.timed_out = False
        self.cancelled = False
        self.lost = False
        # Why it was lost, when not because the server stopped (LOST_NOTICE): a fenced replica.
        self.lost_notice: str | None = None
        self.holds_job_slot = False
        # Read by the idle timeout (executions/idle.py); set by every chunk of output.
        self.last_output_monotonic = self.started_monotonic
        self.notify_url: str | None = None  # delivered to once terminal (app/notifications)
        self.notices: list[str] = []
        # The sandbox profile it runs in (None: the sandbox is off), for the refusal notice.
        self.sandbox: SandboxProfile | None = None
        # The database row as inserted, then as finished: lets the waiting caller answer
        # without reading it back.
        self.record: Execution | None = None
        self._loop = loop
        # Two locks, so the loop never waits for a window being fed. `_lock` guards the log's
        # writes, the recent output, the backlog and its flags: held for a few microseconds.
        # `_sink_lock` guards the window (`sink`), which the worker holds for a whole slice
        # (≈ 1 ms of random bytes): only a summary waits for it. Order: `_lock`, then
        # `_sink_lock`, never the other way.
        self._lock = threading.Lock()
        self._sink_lock = threading.Lock()
        self._on_storage_full = on_storage_full
        # Set when a write to the log failed for lack of space: later output is dropped (the
        # log keeps an exact prefix, never a stream with a hole) and the record says so.
        self.storage_full = False
        self._wake_pending = False
        self._finishing: asyncio.Future[None] | None = None
        # Output whose cleaning is costly, waiting for the shared sink worker, in order; while
        # it is not empty every chunk joins it (so the window sees the stream in order).
        self._sink_backlog = bytearray()
        self._sink_backlogged = False
        self._exit_after_backlog: ExitStatus | None = None
        self._reading_paused = False
        # Large chunks waiting for the log writer (app/output/log_writer.py), in order, and
        # whether a write of this execution is under way there: while it is, every chunk
        # queues behind it, and the exit waits for the queue to be written.
        self._log_queue: list[tuple[bytes, OutputStream]] = []
        self._log_queued_bytes = 0
        self._log_writing = False
        self._log_paused = False
        self._exit_after_log: ExitStatus | None = None
        # Set when a write to the log failed otherwise than for lack of space: later output is
        # dropped, as after a full disk, and the record says so.
        self._log_failed = False
        # The end of what was handed on (to the recent output, the window and the waiters):
        # the log's own total runs ahead of it while the writer's chunks come back to the loop.
        self._taken_bytes = log.total_bytes
        self._changed = asyncio.Event()
        self.exited: asyncio.Future[ExitStatus] = loop.create_future()
        # Set once the terminal record is in the database: waiters then read it from there.
        self.finished = asyncio.Event()

    # --- called on the loop by the process's reader ---------------------------------------

    def accept_output(self, data: bytes, stream: OutputStream) -> None:
        """The next chunk (one wake-up's reads, at most 256 KiB): to the log, then to the
        inline window and the viewers. A small chunk is written on the loop; a large one (or
        any while one is being written) by the log writer (app/output/log_writer.py), and
        taken on once it is in the log. The window is fed on the loop when cleaning it is
        cheap, else through the shared sink worker (app/output/sink_worker.py)."""
        self.last_output_monotonic = time.monotonic()
        total, pause = 0, False
        with self._lock:
            if self.storage_full or self._log_failed:
                return  # keep draining the pipe so the command is not blocked
            queued = self._log_writing or len(data) >= OFFLOADED_BYTES
            if queued:
                self._log_queue.append((data, stream))
                self._log_queued_bytes += len(data)
                if not self._log_writing:
                    self._log_writing = True
                    LOG_WRITER.submit(self._write_queued)
                pause = self._log_queued_bytes > QUEUED_MAX_BYTES
            else:
                try:
                    total = self.log.append(data, stream)
                except OSError as error:
                    self._write_failed(error)
                    return
        if not queued:
            self._take_written(total, data, stream)
        elif pause:
            self._log_paused = True
            self._pause_reading()

    def _take_written(self, total: int, data: bytes, stream: OutputStream) -> None:
        """On the loop: `data`, now in the log up to `total`, to the recent output, the window
        and the waiters."""
        feed_here = pause = False
        with self._lock:
            self._taken_bytes = total
            self.recent.remember(total - len(data), stream, data)
            if not self._sink_backlogged and (len(data) <= INLINE_FEED_BYTES or data.isascii()):
                # Not backlogged: the worker is done with this window (it clears the flag
                # only once its last slice is fed), and only the loop sets the flag again.
                feed_here = True
            else:
                self._sink_backlog += data
                pause = len(self._sink_backlog) > SINK_BACKLOG_MAX_BYTES
                if not self._sink_backlogged:
                    self._sink_backlogged = True
                    SINK_WORKER.submit(self)
        if feed_here:
            with self._sink_lock:
                self.sink.feed(data)
        elif pause:
            self._reading_paused = True
            self._pause_reading()
        if not self._wake_pending:
            # Once per loop turn, however many chunks arrive in it.
            self._wake_pending = True
            self._loop.call_soon(self._wake)

    # --- called on the log writer's thread -----------------------------------------------------

    def _write_queued(self) -> None:
        """Write what is queued, in order, then hand the chunks written back to the loop. A
        full disk ends the writing as on the loop: the log keeps an exact prefix."""
        with self._lock:
            queued, self._log_queue = self._log_queue, []
            self._log_queued_bytes = 0
        written: list[tuple[int, bytes, OutputStream]] = []
        try:
            # One append per run of one stream's chunks: each `pwrite` drops the interpreter
            # lock, and taking it back from a busy loop can wait out the switch interval.
            for stream, run in itertools.groupby(queued, key=operator.itemgetter(1)):
                chunks = [data for data, _ in run]
                try:
                    end = self.log.append(b"".join(chunks), stream)
                except OSError:
                    if len(chunks) == 1:
                        raise
                    # As many of the chunks as the log still takes (a full disk), one by one.
                    for data in chunks:
                        written.append((self.log.append(data, stream), data, stream))
                    continue
                end -= sum(map(len, chunks))
                for data in chunks:
                    end += len(data)
                    written.append((end, data, stream))
        except Exception as error:
            with self._lock:
                self._write_failed(error)
        # The loop closed: the server is gone, and nobody waits for these bytes.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._log_written, written)

    # --- back on the loop -------------------------------------------------------------------------

    def _log_written(self, written: list[tuple[int, bytes, OutputStream]]) -> None:
        for total, data, stream in written:
            self._take_written(total, data, stream)
        with self._lock:
            if self.storage_full or self._log_failed:
                self._log_queue.clear()
                self._log_queued_bytes = 0
            more = bool(self._log_queue)
            if more:
                LOG_WRITER.submit(self._write_queued)
            else:
                self._log_writing = False
            resume = self._log_paused and self._log_queued_bytes < QUEUED_RESUME_BYTES
            status = None
            if not more:
                status, self._exit_after_log = self._exit_after_log, None
        if resume:
            self._log_paused = False
            self._read_unless_paused()
        if status is not None:
            self._take_exit(status)

    def _pause_reading(self) -> None:
        if self.process is not None:
            self.process.pause_reading()

    def accept_exit(self, status: ExitStatus) -> None:
        """The process exited and every byte it left was read, so nothing is appended to the
        log after this. With output still waiting for the shared worker, the worker settles
        the window after it, in order, then the exit. Otherwise (the usual quick command) the
        window settles here, what it held back is a few bytes, and the exit is settled at
        once: finishing the log — closing files and writing `.done`, metadata work that stalls
        for 20 ms at times on this machine's ext4 (p99 of `ArtifactLog.finish` 22 ms, median
        0.12 ms), too long for the loop — is left to the end of the run's own worker-thread
        hop (`finish_log`, before its record), one thread hand-off fewer per call."""
        self.wall_time_ms = (time.monotonic() - self.started_monotonic) * 1000
        if status.output_cut is not None:
            self.notices.append(OUTPUT_CUT_NOTICES[status.output_cut.value])
        with self._lock:
            if self._log_writing:
                self._exit_after_log = status  # taken once the last chunk is in the log
                return
        self._take_exit(status)

    def _take_exit(self, status: ExitStatus) -> None:
        with self._lock:
            self._exit_after_backlog = status
            if self._sink_backlogged:
                return  # the worker takes the exit after the backlog (feed_backlog)
            if self.log.truncated:
                # Finishing copies the kept head and tail into one file: after the worker.
                self._sink_backlogged = True
            else:
                self._exit_after_backlog = None
        if self._sink_backlogged:
            SINK_WORKER.submit(self)
            return
        with self._sink_lock:
            self.sink.flush()
        self._settle_exit(status)

    def _finish_truncated(self, status: ExitStatus) -> None:
        """On the loop: finishing a truncated log copies its kept head and tail (up to the
        log's cap) into one file, which would hold the shared worker for seconds: a thread of
        its own."""
        self._finishing = asyncio.ensure_future(self._finish_log_in_thread(status))

    # --- called on the shared sink worker's thread ---------------------------------------------

    def feed_backlog(self, budget: int) -> bool:
        """Feed up to `budget` backlog bytes to the window (`_feed_window`; the loop's reader
        never waits), or, the backlog empty, complete the exit if it came; True when this
        execution wants another turn."""
        status: ExitStatus | None = None
        resume = False
        with self._lock:
            if self._sink_backlog:
                piece = bytes(self._sink_backlog[:budget])
                del self._sink_backlog[:budget]  # amortised O(1) from the front
                resume = self._reading_paused and len(self._sink_backlog) < SINK_RESUME_BYTES
            else:
                piece, status = b"", self._backlog_done()
        if piece:
            # Fed outside `_lock`: the loop keeps appending meanwhile.
            if not self._feed_window(piece):
                with self._lock:
                    self._sink_backlog.clear()
            if resume:
                self._loop.call_soon_threadsafe(self._resume_reading)
            return True  # the rest of the backlog, or the exit, in the next turn
        if status is None:
            return False
        if self.log.truncated:
            self._loop.call_soon_threadsafe(self._finish_truncated, status)
            return False
        try:
            self.finish_log()
        finally:
            self._loop.call_soon_threadsafe(self._settle_exit, status)
        return False

    def _feed_window(self, piece: bytes) -> bool:
        """Feed `piece` to the window: in the window process when it is large enough to be
        worth the copies (the cleaning then holds another interpreter's lock, not ours),
        else here, a slice per hold of `_sink_lock` (a summary on the loop waits for one
        slice at most). False when the window failed (the log is whole either way)."""
        try:
            if len(piece) >= WINDOW_PROCESS_MIN_BYTES:
                # Until the answer comes, readers see the window as it was: nothing else
                # feeds it while the backlog is the worker's.
                fed = WINDOW_PROCESS.feed(self.sink, piece)
                if fed is not None:
                    with self._sink_lock:
                        self.sink = fed
                    return True
            for start in range(0, len(piece), SINK_SLICE_BYTES):
                with self._sink_lock:
                    self.sink.feed(piece[start : start + SINK_SLICE_BYTES])
        except Exception:
            logger.exception("inline window of %s failed (the log is whole)", self.id)
            return False
        return True

    def _backlog_done(self) -> ExitStatus | None:
        """Under the lock, the backlog empty: hand the window back to the loop; the exit to
        complete, if it came (the window then settles what it held back: a trailing \\r,
        half a character, an open escape)."""
        self._sink_backlogged = False
        status, self._exit_after_backlog = self._exit_after_backlog, None
        if status is not None:
            with self._sink_lock:
                self.sink.flush()
        if self._reading_paused:
            self._loop.call_soon_threadsafe(self._resume_reading)
        return status

    def _resume_reading(self) -> None:
        """The sink worker's backlog is below its bound again."""
        self._reading_paused = False
        self._read_unless_paused()

    def _read_unless_paused(self) -> None:
        """Read again once neither the sink worker's backlog nor the log writer's queue is
        over its bound."""
        if not self._reading_paused and not self._log_paused and self.process is not None:
            self.process.resume_reading()

    async def _finish_log_in_thread(self, status: ExitStatus) -> None:
        try:
            await asyncio.to_thread(self.finish_log)
        finally:
            self._settle_exit(status)

    def finish_log(self) -> None:
        """Blocking (a worker thread): close the log and mark it complete once the process
        exited; a no-op when it already is. A full disk is noted as in `accept_output`; any
        other failure is logged (the bytes are all in the log; only `.done` may be missing)."""
        try:
            self.log.finish()
        except OSError as error:
            if not is_storage_full(error):
                logger.exception("could not finish the log of %s", self.id)
                return
            with self._lock:
                self._storage_ran_out()
        except Exception:
            logger.exception("could not finish the log of %s", self.id)

    def _write_failed(self, error: Exception) -> None:
        """Under the lock: a write to the log failed. Later output is dropped (the log keeps
        an exact prefix, never a stream with a hole; the pipe is still drained, so the command
        is not blocked) and the record says why."""
        if isinstance(error, OSError) and is_storage_full(error):
            self._storage_ran_out()
            return
        logger.error(
            "writing the log of %s failed; later output is dropped", self.id, exc_info=error
        )
        if not self._log_failed:
            self._log_failed = True
            self.notices.append(OUTPUT_LOG_FAILED_NOTICE)

    def _storage_ran_out(self) -> None:
        """Under the lock."""
        if self.storage_full:
            return
        self.storage_full = True
        self.notices.append(OUTPUT_STORAGE_FULL_NOTICE)
        if self._on_storage_full is not None:
            self._on_storage_full()

    # --- event loop side ----------------------------------------------------------------------

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def _wake(self) -> None:
        self._wake_pending = False
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _settle_exit(self, status: ExitStatus) -> None:
        if not self.exited.done():
            self.exited.set_result(status)
        self._wake()

    def summary(self, notice: str | None = None) -> OutputSummary:
        with self._sink_lock:
            return self.sink.summary(notice)

    @property
    def total_bytes(self) -> int:
        """The output so far, as its waiters and viewers see it: every byte up to here is in
        the log and in the recent output (`_take_written`)."""
        return self._taken_bytes

    @property
    def has_exited(self) -> bool:
        return self.exited.done()

    async def wait_for_bytes_after(self, offset: int, within: float | None = None) -> None:
        """Return once the log holds more than `offset` bytes, the process exited, or `within`
        seconds passed."""
        deadline = None if within is None else time.monotonic() + within
        while self._taken_bytes <= offset and not self.exited.done():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return
            changed = self._changed
            try:
                await asyncio.wait_for(changed.wait(), remaining)
            except TimeoutError:
                return


class JobSlotLedger(Protocol):
    """The job cap shared with other replicas (app/cluster): a slot per running job."""

    async def acquire(self, execution_id: str) -> bool: ...

    def release(self, execution_id: str) -> None: ...


class Registry:
    def __init__(
        self, max_jobs: int, *, kill_grace_seconds: float, ledger: JobSlotLedger | None = None
    ) -> None:
        self.max_jobs = max_jobs
        self.kill_grace_seconds = kill_grace_seconds
        self.live: dict[str, LiveExecution] = {}
        self._running_jobs = 0
        self._ledger = ledger
        # Ends the unsandboxed commands if this server dies (app/process/fence_watch.py).
        self.fence_watch = FenceWatch()

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

    async def claim_job_slot(self, live: LiveExecution) -> bool:
        """A slot under this server's count and, with other replicas, under the shared one."""
        if not self.reserve_job_slot(live):
            return False
        if self._ledger is None:
            return True
        try:
            granted = await self._ledger.acquire(live.id)
        except BaseException:
            self._release_local(live)
            raise
        if not granted:
            self._release_local(live)
        return granted

    def _release_local(self, live: LiveExecution) -> None:
        live.holds_job_slot = False
        self._running_jobs = max(0, self._running_jobs - 1)

    def release_job_slot(self, live: LiveExecution | None = None) -> None:
        if live is not None:
            if not live.holds_job_slot:
                return
            live.holds_job_slot = False
            if self._ledger is not None:
                self._ledger.release(live.id)
        self._running_jobs = max(0, self._running_jobs - 1)

    def add(self, live: LiveExecution) -> None:
        self.live[live.id] = live

    def get(self, execution_id: str) -> LiveExecution | None:
        return self.live.get(execution_id)

    def remove(self, execution_id: str) -> None:
        self.live.pop(execution_id, None)
        self.fence_watch.ended(execution_id)

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
