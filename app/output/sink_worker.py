"""One thread, shared by every execution, that feeds the inline windows (`OutputSink`) with
output that is costly to clean: bytes that are not ASCII need a UTF-8 decode with replacement,
about 30 ms of interpreter-holding C per MiB of random bytes. Cheap chunks (ASCII, or small) are
fed on the event loop as they are read; an execution whose output needs the worker stays with
it, in order, until its backlog is empty (see `LiveExecution.accept_output`). The end of every
run comes through here too: settling its window and finishing its log (closing files and
writing `.done`: metadata work that can stall for tens of milliseconds on a busy disk, so not
on the event loop). One thread for all runs, never one per run.

The worker takes executions in turn, a few slices each, so one binary flood does not hold back
the others' windows; the backlog of each is bounded by pausing its reader.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Final, Protocol

from app.output.window_process import WindowProcess

logger = logging.getLogger("shellgate.output")

# The bytes fed per turn of one execution before the next waiting one gets the worker.
TURN_BYTES: Final = 256 * 1024


class SinkBacklog(Protocol):
    def feed_backlog(self, budget: int) -> bool:
        """Feed up to `budget` bytes of the backlog; True when more is left (take another turn)."""


class SinkWorker:
    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[SinkBacklog] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def submit(self, backlog: SinkBacklog) -> None:
        if self._thread is None:
            with self._start_lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="output-sink", daemon=True
                    )
                    self._thread.start()
        self._queue.put(backlog)

    def _run(self) -> None:
        while True:
            backlog = self._queue.get()
            try:
                more = backlog.feed_backlog(TURN_BYTES)
            except Exception:  # a bug in one window must not stop the others'
                logger.exception("feeding an inline window failed")
                continue
            if more:
                self._queue.put(backlog)


SINK_WORKER: Final = SinkWorker()
# Where the worker has large costly turns cleaned, off this interpreter's lock.
WINDOW_PROCESS: Final = WindowProcess()
