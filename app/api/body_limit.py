"""A request body has a size cap (docs/api.md#error-envelope-and-codes): 413 `too_large`
beyond it, nothing read past it and nothing done.

FastAPI reads and parses a JSON body before any dependency runs, the bearer token's check
included, so without a cap anyone who can reach the port could make the server hold and parse
a body of any size (200 MB took ~800 MB of memory before the 401). The cap is the JSON body
limit of the routes themselves (`json_body_limit`: a command at `SHELLGATE_MAX_COMMAND_BYTES`
and an env at its limit, every character escaped as `\\uXXXX`), checked here before anything
reads the body. Two routes keep their own rules: `PUT /v1/files` streams
its body to disk under `SHELLGATE_FILES_MAX_BYTES`, and `/mcp` checks the token before it reads
anything.
"""

from __future__ import annotations

from starlette._utils import get_route_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import app_error_response
from app.api.mcp.mount import MCP_PATH
from app.core.asgi_replay import replay_messages
from app.core.errors import PayloadTooLargeError

FILES_PATH = "/v1/files"


class LimitRequestBodies:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or _own_rules(scope):
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(scope, receive, send)
            return
        if declared is not None or not _chunked(scope):
            # The HTTP parser hands on exactly the declared bytes, and a request with neither
            # header has no body: nothing to count (most requests, every GET among them).
            await self.app(scope, receive, send)
            return
        # A chunked body says its size only as it arrives: read ahead to its end (it is small,
        # and FastAPI reads it whole anyway), then hand it on followed by the connection's own
        # messages (a disconnect, later).
        read: list[Message] = []
        size = 0
        while True:
            message = await receive()
            read.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                await self._refuse(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        await self.app(scope, replay_messages(read, receive), send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        error = PayloadTooLargeError(f"The request body is larger than {self.max_bytes} bytes.")
        response = app_error_response(error)
        response.headers["Connection"] = "close"  # the rest of the body is never read
        await response(scope, receive, send)


def _own_rules(scope: Scope) -> bool:
    path = get_route_path(scope)
    return path == MCP_PATH or (scope["method"] == "PUT" and path == FILES_PATH)


def _chunked(scope: Scope) -> bool:
    return any(
        name == b"transfer-encoding" and b"chunked" in value.lower()
        for name, value in scope.get("headers", [])
    )


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
