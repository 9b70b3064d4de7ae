"""While the server stops, new work is refused with 503 `shutting_down` and `Retry-After`.

Reads (GET/HEAD/OPTIONS) are still answered, and a cancel is still accepted (it only stops
work); anything else could start a command, a session or a decision after the running
commands were told to stop. A pure ASGI middleware: it sees every route, MCP included, before
any body is read.
"""

from __future__ import annotations

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.errors import app_error_response
from app.errors import ShuttingDownError

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class RefuseNewWorkWhileStopping:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and _is_new_work(scope) and _stopping(scope):
            response: JSONResponse = app_error_response(ShuttingDownError())
            response.headers["Connection"] = "close"
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _is_new_work(scope: Scope) -> bool:
    return scope["method"] not in READ_METHODS and not scope["path"].endswith("/cancel")


def _stopping(scope: Scope) -> bool:
    services = getattr(scope["app"].state, "services", None)
    return services is not None and bool(services.executions.stopping)
