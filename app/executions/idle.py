"""`idle_timeout`: an execution that prints nothing for N seconds is probably waiting for input
(a prompt, a pager, a lock) or stuck. Its caller is then answered at once (`background`, the
command goes on as a job) or the command is cancelled (`cancel`), with the notice below.

The clock is the output itself: every chunk stamps `LiveExecution.last_output_monotonic` (in
the pump), and the one timer of an execution is due N seconds after the last stamp. When it
fires early because output came meanwhile, it is re-armed for the rest of the quiet period
measured from that output, so a chatty command costs one timer callback per N seconds, not
one per chunk, and a silent one fires exactly N seconds after its last byte."""

from __future__ import annotations

import asyncio
import time

from app.executions.registry import LiveExecution, Registry
from app.executions.timeouts import format_seconds
from app.store.models import ExecutionMode

IDLE_NOTICE = "No output for {seconds}s; the command may be waiting for input or stuck."


def idle_notice(seconds: float) -> str:
    return IDLE_NOTICE.format(seconds=format_seconds(seconds))


class IdleWatch:
    def __init__(
        self, live: LiveExecution, seconds: float, action: str, registry: Registry
    ) -> None:
        self.live = live
        self.seconds = seconds
        self.action = action
        self.notice = idle_notice(seconds)
        # Set when the quiet period ran out (action `background`): the waiting caller answers.
        self.fired = asyncio.Event()
        self._registry = registry
        self._loop = asyncio.get_running_loop()
        self._handle = self._loop.call_later(seconds, self._check)
        live.exited.add_done_callback(lambda _: self._handle.cancel())

    def _check(self) -> None:
        live = self.live
        if live.has_exited or live.cancelled or live.timed_out or live.lost:
            return
        quiet_for = time.monotonic() - live.last_output_monotonic
        if quiet_for < self.seconds:
            self._handle = self._loop.call_later(self.seconds - quiet_for, self._check)
            return
        if self.action == "cancel":
            live.notices.append(self.notice)
            self._registry.cancel(live)
        elif live.mode is ExecutionMode.foreground:
            self.fired.set()


def watch_idle(
    live: LiveExecution, seconds: float | None, action: str, registry: Registry
) -> IdleWatch | None:
    """Arm the idle timeout of a started execution (None: it has none, or it is already a job
    and its idle action would change nothing)."""
    if seconds is None:
        return None
    if action != "cancel" and live.mode is ExecutionMode.job:
        return None
    return IdleWatch(live, seconds, action, registry)
