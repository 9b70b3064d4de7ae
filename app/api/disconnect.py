"""A held call's caller going away. uvicorn does not cancel a request's task when its client
disconnects: it only answers the request's ASGI receive channel with `http.disconnect` (at
once, from the connection's `connection_lost`). A call that holds its request open for a long
time (for an approval) awaits that channel beside its wait, so that it hears the caller leave
when it happens, with no polling."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.types import Receive


def caller_gone(receive: Receive) -> Callable[[], Awaitable[None]]:
    """What returns once the client has disconnected. Only for a request whose body has been
    read to its end: anything the channel still had to give would be swallowed."""

    async def gone() -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            # An empty `http.request` that closes the body (uvicorn may give one once more):
            # nothing to keep, and the next receive waits for the connection's next event.

    return gone
