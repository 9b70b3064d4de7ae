"""The monitor: one thread watching the kernel counters of every running confined execution."""

from __future__ import annotations

import logging
import threading

from app.confinement.units import Unit

logger = logging.getLogger("shellgate.confinement")

# Kernel counters the cgroup backends watch have no notification in v1 (pids.events): one
# monitor thread reads them for every running execution at this period.
MONITOR_PERIOD = 0.2


class Monitor:
    """One thread reading the kernel counters of every running confined execution; a hit
    kills the whole unit at once (a limit ends the run) and reports the notice."""

    def __init__(self) -> None:
        self._units: dict[str, Unit] = {}
        self._lock = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def watch(self, unit: Unit) -> None:
        if not unit.watched:
            return
        with self._lock:
            self._units[unit.execution_id] = unit
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="confinement-monitor", daemon=True
                )
                self._thread.start()
            self._lock.notify()

    def forget(self, unit: Unit) -> None:
        with self._lock:
            self._units.pop(unit.execution_id, None)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._lock.notify()

    def _run(self) -> None:
        while True:
            with self._lock:
                # Idle (nothing confined runs) until a unit arrives.
                while not self._units and not self._stopped:
                    self._lock.wait()
                if self._stopped:
                    return
                watched = list(self._units.values())
            for unit in watched:
                if unit.hit is not None:
                    continue
                try:
                    notice = unit.check_running()
                except Exception:  # a vanished file must not end the monitor
                    logger.exception("reading the limits of %s failed", unit.execution_id)
                    continue
                if notice is not None:
                    unit.hit = notice
                    logger.info("%s: %s; killing its processes", unit.execution_id, notice)
                    unit.kill_all()  # the run ends: its pump sees the exit
            with self._lock:
                if not self._stopped:
                    self._lock.wait(MONITOR_PERIOD)
