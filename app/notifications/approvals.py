"""Approval events (docs/policy.md#hearing-of-prompts): every approval this server requests
or decides is POSTed, signed, to `SHELLGATE_APPROVAL_NOTIFY_URL`, so that approvers hear of a
prompt without watching the console.

The approval service tells of an event synchronously (`heard`); the body is made then, from
the approval as it is at that moment, and queued. One task delivers the queue in order, each
event through the completion deliverer's own attempt (delivery.py: allow-list and address
checks, signature, timeout, per-receiver limit), retried with its backoff until
`SHELLGATE_NOTIFY_RETRY_SECONDS` after the event. Nothing that creates or decides an approval
ever waits on the receiver. The queue lives in memory: a server that stops with events still
undelivered logs how many (the approvals themselves are in the registry)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from dataclasses import dataclass

from app.approvals.service import approval_public
from app.core.config import Settings
from app.core.random_ids import random_token
from app.notifications.delivery import Notifier
from app.store.models import Approval

logger = logging.getLogger("shellgate.notifications")

# Events waiting at most (a receiver down for the whole retry window with approvals flowing):
# beyond it the oldest is dropped, with a warning. A few megabytes at most.
QUEUE_LIMIT = 10_000
# A stopping server gives the queue this long to drain (a receiver that is up takes
# milliseconds; one that is down is not waited for).
FLUSH_SECONDS = 2.0


def console_link(public_url: str, approval: Approval) -> str | None:
    """Where an approver decides it: the console's page of the execution that waits, or its
    approvals inbox for an approval with no execution (a file operation's)."""
    if not public_url:
        return None
    if approval.execution_id is None:
        return f"{public_url}/console/#/"
    return f"{public_url}/console/#/executions/{approval.execution_id}"


def event_body(kind: str, approval: Approval, event_id: str, public_url: str) -> bytes:
    """The event as JSON: the approval as the API shows it, but its `env` reduced to the
    variable names (values may be credentials, and a chat channel is no place for them)."""
    shown = approval_public(approval).model_dump(mode="json")
    env = shown.pop("env")
    shown["env_names"] = sorted(env)
    content = {
        "type": kind,
        "id": event_id,
        "approval": shown,
        "console_url": console_link(public_url, approval),
    }
    return json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


@dataclass
class _Event:
    id: str
    kind: str
    approval_id: str
    body: bytes
    heard_at: float  # monotonic: the retry window's start
    attempts: int = 0


class ApprovalNotifier:
    def __init__(self, settings: Settings, deliverer: Notifier) -> None:
        self._url = settings.approval_notify_url
        # The settings refuse an approval URL without the server-wide secret.
        self._secret = settings.notify_secret or None
        self._window = settings.notify_retry_seconds
        self._public_url = settings.public_url
        self._deliverer = deliverer
        self._queue: deque[_Event] = deque()
        self._waiting = asyncio.Event()  # set while the queue holds something
        self._drained = asyncio.Event()  # set while it holds nothing
        self._drained.set()
        self._worker: asyncio.Task[None] | None = None
        self._closed = False
        self.delivered = 0
        self.dropped = 0

    @property
    def queued(self) -> int:
        return len(self._queue)

    def heard(self, kind: str, approval: Approval) -> None:
        """An approval requested or decided here (on the event loop; never waits)."""
        if self._url is None or self._closed:
            return
        event_id = "evt_" + random_token(15)
        body = event_body(kind, approval, event_id, self._public_url)
        if len(self._queue) >= QUEUE_LIMIT:
            lost = self._queue.popleft()
            self.dropped += 1
            logger.warning(
                "approval event queue full (%d): dropped %s of %s",
                QUEUE_LIMIT,
                lost.kind,
                lost.approval_id,
            )
        self._queue.append(_Event(event_id, kind, approval.id, body, time.monotonic()))
        self._waiting.set()
        self._drained.clear()
        if self._worker is None:
            self._worker = asyncio.create_task(self._deliver_forever())

    async def close(self) -> None:
        """Give what is queued a moment to go out, then stop (before the deliverer closes)."""
        self._closed = True
        if self._worker is None:
            return
        if self._queue:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._drained.wait(), FLUSH_SECONDS)
        self._worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._worker
        if self._queue:
            logger.warning("%d approval events were not delivered before the stop", self.queued)

    async def _deliver_forever(self) -> None:
        assert self._url is not None
        while True:
            if not self._queue:
                self._waiting.clear()
                self._drained.set()
                await self._waiting.wait()
                continue
            event = self._queue[0]
            event.attempts += 1
            headers = {
                "X-Shellgate-Event": event.kind,
                "X-Shellgate-Event-Id": event.id,
                "X-Shellgate-Approval": event.approval_id,
                "X-Shellgate-Attempt": str(event.attempts),
            }
            try:
                attempt = await self._deliverer.attempt(
                    self._url, self._secret, event.body, headers
                )
                error = attempt["error"]
            except Exception as failure:  # never let one event stop the ones behind it
                logger.exception("approval event %s could not be sent", event.id)
                error = f"{type(failure).__name__}: {failure}"
            if error is None:
                self._queue.popleft()
                self.delivered += 1
                continue
            delay = self._deliverer.backoff(event.attempts)
            if time.monotonic() + delay - event.heard_at > self._window:
                self._queue.popleft()
                self.dropped += 1
                logger.warning(
                    "gave up delivering %s of %s after %d attempts: %s",
                    event.kind,
                    event.approval_id,
                    event.attempts,
                    error,
                )
                continue
            logger.info(
                "approval event %s not delivered (%s); retrying in %gs", event.id, error, delay
            )
            await asyncio.sleep(delay)
