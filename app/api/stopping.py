"""While the server stops, new work is refused with 503 `shutting_down` and `Retry-After`.

Reads (GET/HEAD/OPTIONS) are still answered, and a cancel is still accepted (it only stops
work); anything else could start a command, a session or a decision after the running
commands were told to stop. A pure ASGI middleware: it sees every route, MCP included, before
any body is read.

It also answers the requests the stop cuts short. uvicorn cancels whatever is still open half
way through the grace (a request whose body never finishes arriving, a slow download); left
alone, that cancellation reaches uvicorn, which logs a traceback and answers 500. A request cut
before its answer began gets the same 503 `shutting_down` as new work; one cut mid-answer ends
with a log line (the client sees a truncated body, as for any dropped connection).
"""

from __future__ import annotations

import asyncio
import logging

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import app_error_response
from app.core.errors import ShuttingDownError

logger = logging.getLogger("shellgate.http")

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class RefuseNewWorkWhileStopping:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if _is_new_work(scope) and _stopping(scope):
            await _refusal()(scope, receive, send)
            return
        answer_began = False

        async def send_watched(message: Message) -> None:
            nonlocal answer_began
            if message["type"] == "http.response.start":
                answer_began = True
            await send(message)

        try:
            await self.app(scope, receive, send_watched)
        except asyncio.CancelledError:
            if not _stopping(scope):
                raise  # a client gone away, a test's cancel: not ours to answer
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()  # the cancel was the stop's; this answer is the request's end
            if answer_began:
                logger.warning(
                    "%s %s cut short by the shutdown after its answer began",
                    scope["method"],
                    scope["path"],
                )
                return
            await _refusal()(scope, receive, send)


def _refusal() -> JSONResponse:
    response: JSONResponse = app_error_response(ShuttingDownError())
    response.headers["Connection"] = "close"
    return response


def _is_new_work(scope: Scope) -> bool:
    return scope["method"] not in READ_METHODS and not scope["path"].endswith("/cancel")


def _stopping(scope: Scope) -> bool:
    services = getattr(scope["app"].state, "services", None)
    return services is not None and bool(services.executions.stopping)
