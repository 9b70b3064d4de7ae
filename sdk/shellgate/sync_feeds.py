# Generated from async_feeds.py by sdk/generate_sync.py: do not edit. Change async_feeds.py,
# then run `make sync-sdk`.
"""The client's live feeds (docs/sdk.md#events-and-the-approvals-feed): an execution's state
changes over Server-Sent Events, and the approvals WebSocket. Both reconnect when the
connection drops, as `stream()` does: the events resume after the last id handed out; the
approvals feed starts again with a fresh snapshot. sync_feeds.py is generated from
async_feeds.py."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
from httpx_sse import SSEError, connect_sse
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI
from websockets.sync.client import connect

from shellgate import calls, feeds
from shellgate.models import ApprovalEvent, ExecutionEvent
from shellgate.reconnect import Backoff
from shellgate.sync_primitives import sleep


class SyncFeeds:
    """Mixed into the client (`AsyncClient`, `Client`), which provides the HTTP connection
    and the credentials."""

    _http: httpx.Client
    base_url: str
    token: str | None
    reconnects: int

    def events(self, execution_id: str, *, last_event_id: int = 0) -> Iterator[ExecutionEvent]:
        """The execution's state changes, each with its record, until the `end` event (the
        terminal record). For a client that cannot take a webhook. A dropped connection is
        reopened with `Last-Event-ID`, so no event is repeated or lost; pass `last_event_id`
        to resume after an event a previous loop saw."""
        seen = last_event_id
        backoff = Backoff(self.reconnects)
        path = feeds.events_path(execution_id)
        while True:
            try:
                with connect_sse(
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
                        response.read()
                        raise calls.error_from(response)
                    for sse in source.iter_sse():
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
            sleep(backoff.failed(f"the events of {execution_id}"))

    def approval_events(self) -> Iterator[ApprovalEvent]:
        """The approvals feed: a `snapshot` of the pending approvals, then each
        `approval.requested` and `approval.decided` as it happens (agents see their own
        executions' only). Runs until the loop is left; a dropped connection is reopened and
        starts with a new snapshot."""
        backoff = Backoff(self.reconnects)
        url = feeds.approvals_url(self.base_url)
        while True:
            try:
                socket = connect(
                    url,
                    additional_headers=calls.auth_headers(self.token),
                    open_timeout=calls.CONNECT_SECONDS,
                    max_size=None,
                )
            except (OSError, TimeoutError, InvalidHandshake, InvalidURI):
                sleep(backoff.failed("the approvals feed"))
                continue
            with socket:
                try:
                    for message in socket:
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
            sleep(backoff.failed("the approvals feed"))
