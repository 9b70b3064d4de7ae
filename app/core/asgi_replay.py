"""A request body read ahead (to check its size, find its session or carry it elsewhere),
handed on to the next layer as if it had not been read: the messages taken, then the
connection's own (its disconnect). One version for every layer that reads ahead: the body cap,
the lean hot routes, the forwarding and the MCP mount."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]


def replay_messages(read: list[Message], receive: Receive) -> Receive:
    """The messages read already, in order, then `receive`'s."""
    pending = list(read)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed


def replay_body(body: bytes, receive: Receive) -> Receive:
    """The whole body as one message, then `receive`'s."""
    return replay_messages([{"type": "http.request", "body": body, "more_body": False}], receive)
