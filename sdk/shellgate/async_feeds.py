"""The client's live feeds (docs/sdk.md#events-and-the-approvals-feed): an execution's state
changes over Server-Sent Events, and the approvals WebSocket. Both reconnect when the
connection drops, as `stream()` does: the events resume after the last id handed out; the
approvals feed starts again with a fresh snapshot. sync_feeds.py is generated from
async_feeds.py."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
from httpx_sse import SSEError, aconnect_sse
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from shellgate import calls, feeds
from shellgate.async_primitives import sleep
from shellgate.models import ApprovalEvent, ExecutionEvent
from shellgate.reconnect import Backoff


class AsyncFeeds:
    """Mixed into the client (`AsyncClient`, `Client`), which provides the HTTP connection
    and the credentials."""

    _http: httpx.AsyncClient
    base_url: str
    token: str | None
    reconnects: int

    async def events(
        self, execution_id: str, *, last_event_id: int = 0
    ) -> AsyncIterator[ExecutionEvent]:
        """The execution's state changes, each with its record, until the `end` event (the
        terminal record). For a client that cannot take a webhook. A dropped connection is
        reopened with `Last-Event-ID`, so no event is repeated or lost; pass `last_event_id`
        to resume after an event a previous loop saw."""
        seen = last_event_id
        backoff = Backoff(self.reconnects)
        path = feeds.events_path(execution_id)
        while True:
            try:
                async with aconnect_sse(
                    self._http,
                    "GET",
                    path,
                    headers=feeds.resume_headers(seen),
                    timeout=calls.timeout(feeds.EVENTS_READ_SECONDS),
                ) as source:
                    response = source.response
                    if response.status_code == 204:
                        return  # the end was already seen
                    if response.status_code >= 400:
                        await response.aread()
                        raise calls.error_from(response)
                    async for sse in source.aiter_sse():
                        event = feeds.execution_event(sse)
                        if event is None or event.id <= seen:
                            continue
                        seen = event.id
                        backoff.progressed()
                        yield event
                        if event.id >= feeds.END_EVENT_ID:
                            return
            except (httpx.TransportError, httpx.StreamError, SSEError):
                pass  # reopened below, after the last event handed out
            # Also when the stream ended before its end (the server restarting).
            await sleep(backoff.failed(f"the events of {execution_id}"))

    async def approval_events(self) -> AsyncIterator[ApprovalEvent]:
        """The approvals feed: a `snapshot` of the pending approvals, then each
        `approval.requested` and `approval.decided` as it happens (agents see their own
        executions' only). Runs until the loop is left; a dropped connection is reopened and
        starts with a new snapshot."""
        backoff = Backoff(self.reconnects)
        url = feeds.approvals_url(self.base_url)
        while True:
            try:
                socket = await connect(
                    url,
                    additional_headers=calls.auth_headers(self.token),
                    open_timeout=calls.CONNECT_SECONDS,
                    max_size=None,
                )
            except (OSError, TimeoutError, InvalidHandshake, InvalidURI):
                await sleep(backoff.failed("the approvals feed"))
                continue
            async with socket:
                try:
                    async for message in socket:
                        event = feeds.approval_event(message)
                        if event is not None:
                            backoff.progressed()
                            yield event
                except ConnectionClosed as closed:
                    received = closed.rcvd
                    if received is not None and (
                        error := feeds.closed_for_good(received.code, received.reason)
                    ):
                        raise error from None
            await sleep(backoff.failed("the approvals feed"))
