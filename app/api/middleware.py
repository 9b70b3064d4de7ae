"""The one HTTP middleware: a request id on every request, an access line and the request
metrics, all keyed by the route template (`/v1/executions/{execution_id}`), never the raw path:
raw paths hold ids and query strings may hold WebSocket tickets."""

from __future__ import annotations

import logging
import os
import random
import re
import time

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.observability.logs import request_id_var, trace_id_var
from app.observability.metrics import Metrics
from app.observability.tracing import TRACING_OFF, Tracing

logger = logging.getLogger("shellgate.access")

REQUEST_ID_HEADER = "X-Request-ID"
# A gateway's id is kept only when it cannot forge log lines or header values.
_ACCEPTABLE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:/+=@-]{1,128}$")
UNMATCHED_ROUTE = "<unmatched>"
# Request ids need to be unique, not secret: drawn from a generator seeded once from the OS,
# not from `uuid4`, whose `os.urandom` gives up the interpreter lock on every request — and
# the event loop then waits up to a switch interval to get it back from a busy worker thread
# (the same cost RELIABILITY.md "Soak" measured for reads on the loop).
_request_ids = random.Random(os.urandom(32))
# A forked child (a migration child, a pre-fork worker) must not repeat its parent's ids.
os.register_at_fork(after_in_child=lambda: _request_ids.seed(os.urandom(32)))


def incoming_request_id(scope: Scope) -> str:
    for name, value in scope.get("headers", []):
        if name == b"x-request-id":
            text: str = value.decode("latin-1")
            if _ACCEPTABLE_REQUEST_ID.match(text):
                return text
            break
    return f"{_request_ids.getrandbits(128):032x}"


# Fixed paths served without a route Starlette names in the scope (the MCP app is mounted; the
# documentation pages are answered before routing): their own path is their template.
_FIXED_PATHS = frozenset({"/mcp", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})


def route_template(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str) and path:
        return path
    requested: str = scope.get("path", "")
    root: str = scope.get("root_path", "")
    if root and requested.startswith(root):
        requested = requested[len(root) :]
    if requested in _FIXED_PATHS or requested.rstrip("/") == "/mcp":
        return requested.rstrip("/") or requested
    return UNMATCHED_ROUTE


class RequestObservationMiddleware:
    def __init__(self, app: ASGIApp, metrics: Metrics, tracing: Tracing = TRACING_OFF) -> None:
        self.app = app
        self.metrics = metrics
        self.tracing = tracing

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        request_id = incoming_request_id(scope)
        # Not reset afterwards: each request runs in a context of its own, and the handler of
        # an unexpected error (outside this middleware) still needs the id.
        request_id_var.set(request_id)
        if self.tracing.enabled:
            # The tracing middleware runs outside this one: its server span is current here.
            trace_id_var.set(self.tracing.current_trace_id())
        if scope["type"] == "websocket":
            await self.app(scope, receive, send)
            return
        status = 500
        started = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                MutableHeaders(scope=message)[REQUEST_ID_HEADER] = request_id
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - started
            route = route_template(scope)
            self.metrics.observe_request(scope["method"], route, status, elapsed)
            if logger.isEnabledFor(logging.INFO):  # the extra fields cost even when dropped
                logger.info(
                    "%s %s %d %.1f ms",
                    scope["method"],
                    route,
                    status,
                    elapsed * 1000,
                    extra={
                        "method": scope["method"],
                        "route": route,
                        "status": status,
                        "duration_ms": round(elapsed * 1000, 1),
                    },
                )
