"""One database outage, logged once: the first failure with its traceback, then nothing per
call until the database answers again, when one line says for how long it was gone and how many
calls failed meanwhile. Every request and every background loop (heartbeat, approvals poll,
job-slot releases) fails while the database is down; a traceback for each of them buried the
one that mattered."""

from __future__ import annotations

import logging
import threading
import time

logger = logging.getLogger("shellgate.store")


class OutageLog:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: float | None = None  # monotonic start of the outage in progress
        self._failed_calls = 0

    @property
    def in_progress(self) -> bool:
        return self._since is not None

    def failed(self, error: BaseException) -> None:
        """A call found the database unreachable."""
        with self._lock:
            self._failed_calls += 1
            if self._since is not None:
                return
            self._since = time.monotonic()
        logger.error(
            "database unreachable: calls answer 503 until it is back (logged once per outage)",
            exc_info=error,
        )

    def answered(self) -> None:
        """A call succeeded; ends the outage in progress, if any. Cheap when there is none."""
        if self._since is None:
            return
        with self._lock:
            if self._since is None:
                return
            lasted, failed = time.monotonic() - self._since, self._failed_calls
            self._since, self._failed_calls = None, 0
        logger.warning(
            "database answers again after %.1f s; %d calls failed meanwhile", lasted, failed
        )
