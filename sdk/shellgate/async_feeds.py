"""The async client's live feeds, the twins of sync_feeds.py
(docs/sdk.md#events-and-the-approvals-feed)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
from httpx_sse import SSEError, aconnect_sse
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from shellgate import calls, feeds
from shellgate.models import ApprovalEvent, ExecutionEvent
from shellgate.reconnect import Backoff
from shellgate.sync_feeds import EVENTS_READ_SECONDS


class AsyncFeeds:
    """Mixed into `AsyncClient`, which provides the HTTP connection and the credentials."""

    _http: httpx.AsyncClient
    base_url: str
    token: str | None
    reconnects: int

    async def events(
        self, execution_id: str, *, last_event_id: int = 0
    ) -> AsyncIterator[ExecutionEvent]:
        """As `Client.events`: state changes until `end`, resumed with `Last-Event-ID`."""
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
                    timeout=calls.timeout(EVENTS_READ_SECONDS),
                ) as source:
                    response = source.response
                    if response.status_code == 204:
                        return
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
                pass
            await asyncio.sleep(backoff.failed(f"the events of {execution_id}"))

    async def approval_events(self) -> AsyncIterator[ApprovalEvent]:
        """As `Client.approval_events`: a snapshot, then requests and decisions as they come;
        a reconnect starts with a new snapshot."""
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
                await asyncio.sleep(backoff.failed("the approvals feed"))
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
            await asyncio.sleep(backoff.failed("the approvals feed"))
