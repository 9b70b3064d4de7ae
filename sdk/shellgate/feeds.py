"""The two live feeds, read the same way by the sync and the async client (no I/O here): an
execution's state changes as Server-Sent Events (docs/api.md#server-sent-events), resumed
with `Last-Event-ID`, and the approvals WebSocket (docs/policy.md#approvals), which starts
each connection with a snapshot of what is pending."""

from __future__ import annotations

import json

from httpx_sse import ServerSentEvent

from shellgate.errors import ApiError, ServerUnreachableError
from shellgate.frames import refusal
from shellgate.models import Approval, ApprovalEvent, Execution, ExecutionEvent
from shellgate.paths import segment

END_EVENT_ID = 3  # the `end` event: the record is terminal and the stream ends
# The server sends a comment every 15 s by default (SHELLGATE_SSE_HEARTBEAT_SECONDS, at most
# 30); a read that hears nothing for longer is a dead connection, reopened.
EVENTS_READ_SECONDS = 60.0
# Close 1013 ("try again later"): the listener fell behind; a reconnect gets a fresh snapshot.
OVERFLOW_CLOSE = 1013


def events_path(execution_id: str) -> str:
    return f"/v1/executions/{segment(execution_id)}/events"


def resume_headers(seen: int) -> dict[str, str]:
    return {"Last-Event-ID": str(seen)} if seen else {}


def execution_event(sse: ServerSentEvent) -> ExecutionEvent | None:
    """An event with a record, or None for the `retry:` preamble."""
    if not sse.data or not sse.id:
        return None
    try:
        return ExecutionEvent(
            id=int(sse.id), event=sse.event, execution=Execution.model_validate_json(sse.data)
        )
    except ValueError:
        raise ServerUnreachableError(f"an unreadable event (id {sse.id!r})") from None


def approvals_url(base_url: str) -> str:
    scheme, _, rest = base_url.partition("://")
    return f"{'wss' if scheme == 'https' else 'ws'}://{rest}/v1/approvals/stream"


def approval_event(message: str | bytes) -> ApprovalEvent | None:
    """A frame worth handing out, or None for a ping (and for `overflow`, which the close
    that follows turns into a reconnect)."""
    body = json.loads(message)
    kind = body.get("type")
    if kind == "snapshot":
        approvals = [Approval.model_validate(item) for item in body.get("approvals", [])]
        return ApprovalEvent(type=kind, approvals=approvals)
    if isinstance(kind, str) and isinstance(body.get("approval"), dict):
        return ApprovalEvent(type=kind, approval=Approval.model_validate(body["approval"]))
    return None


def closed_for_good(code: int | None, reason: str) -> ApiError | None:
    """The refusal a close code carries (4401: the token), or None: reconnect."""
    if code is None or code == OVERFLOW_CLOSE:
        return None
    return refusal(code, reason)
