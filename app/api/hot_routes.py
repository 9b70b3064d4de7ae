"""The hot requests answered without FastAPI's routing and dependency solving.

A foreground `POST /v1/executions`, `GET /v1/executions/{id}` (with `?wait`), its `/output`
and `/healthz` are most of what an agent sends. For them FastAPI walks its included routers,
builds a dependency graph's values, re-checks the request against every parameter and wraps
the endpoint in two more layers (bench/PROFILE.md, "Lean hot routes": about a third of the
server's CPU per call). This layer, the innermost of the app's own middlewares, recognises
those requests by method and path and calls the very same endpoint functions, with the very
same body model (`ModelField.validate` on the strict JSON parser's result), bearer-token
dependency and response model serialisation that FastAPI uses.

It takes a request only when it is certainly valid: a JSON content type, a body that parses
and validates, query parameters of the plain forms the routes document, in range. Anything
else (a malformed body, an unknown or repeated parameter, a value out of range, a body over
`LEAN_BODY_LIMIT`) goes on to FastAPI with the bytes already read replayed, so every 422 and
every other refusal keeps FastAPI's own shape and message. Domain errors (`AppError`) get the
app's error envelope here, through the same `app_error_response` as the exception handler.
`openapi.json` does not change: the routes are still declared, and still serve whatever this
layer passes on.
"""

from __future__ import annotations

import math
import re
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi.routing import APIRoute
from starlette._utils import get_route_path
from starlette.requests import HTTPConnection, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api import deps
from app.api.errors import app_error_response
from app.api.routes import executions, health
from app.core.asgi_replay import replay_messages
from app.core.errors import AppError
from app.core.strict_json import loads_strict

# A submit is a command and a few options; a larger body (a long heredoc) takes the general
# path, which reads it however large it is.
LEAN_BODY_LIMIT = 256 * 1024
_EXECUTION = re.compile(r"^/v1/executions/([^/]+)$")
_OUTPUT = re.compile(r"^/v1/executions/([^/]+)/output$")
_DIGITS = re.compile(r"^[0-9]{1,15}$")
_DECIMAL = re.compile(r"^[0-9]{1,9}(?:\.[0-9]{1,9})?$")
# The body forms a client sends for `Content-Type`; anything else is FastAPI's to judge.
_JSON_TYPES = frozenset({b"application/json", b"application/json; charset=utf-8"})

Handler = Callable[[Scope, Receive, Send], Awaitable[None]]


def _route(router_routes: list[Any], endpoint: Callable[..., Any]) -> APIRoute:
    for route in router_routes:
        if isinstance(route, APIRoute) and route.endpoint is endpoint:
            return route
    raise LookupError(f"no route serves {endpoint.__name__}")


SUBMIT = _route(executions.router.routes, executions.create_execution)
READ = _route(executions.router.routes, executions.get_execution)
OUTPUT = _route(executions.router.routes, executions.read_output)
HEALTHZ = _route(health.router.routes, health.healthz)


def _query(scope: Scope, allowed: frozenset[str]) -> dict[str, str] | None:
    """The query's parameters when each is one of `allowed`, given once, in plain text (no
    escapes, which FastAPI would decode); None for anything else."""
    raw: bytes = scope.get("query_string", b"")
    if not raw:
        return {}
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        return None
    found: dict[str, str] = {}
    for pair in text.split("&"):
        name, equals, value = pair.partition("=")
        if not equals or name not in allowed or name in found or "%" in value or "+" in value:
            return None
        found[name] = value
    return found


def _header(scope: Scope, wanted: bytes) -> bytes | None:
    for name, value in scope["headers"]:
        if name == wanted:
            return bytes(value)
    return None


class LeanHotRoutes:
    """ASGI middleware; passes on every request it does not answer itself."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["app"].dependency_overrides:
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        path = get_route_path(scope)
        if method == "POST":
            if path == SUBMIT.path:
                await self._submit(scope, receive, send)
                return
        elif method == "GET":
            if path == HEALTHZ.path:
                await self._answer(HEALTHZ, scope, receive, send, {})
                return
            if (match := _EXECUTION.match(path)) is not None:
                await self._read(scope, receive, send, match.group(1))
                return
            if (match := _OUTPUT.match(path)) is not None:
                await self._output(scope, receive, send, match.group(1))
                return
        await self.app(scope, receive, send)

    async def _submit(self, scope: Scope, receive: Receive, send: Send) -> None:
        read: list[Message] = []
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            read.append(message)
            if message["type"] != "http.request":
                await self.app(scope, replay_messages(read, receive), send)
                return
            chunk = message.get("body", b"")
            chunks.append(chunk)
            size += len(chunk)
            if size > LEAN_BODY_LIMIT:
                await self.app(scope, replay_messages(read, receive), send)
                return
            if not message.get("more_body", False):
                break
        body = _validated_body(scope, b"".join(chunks))
        if body is None:
            await self.app(scope, replay_messages(read, receive), send)
            return
        # The endpoint listens on `receive` for the client's disconnect while it holds the
        # call for an approval: the body has been read from it to its end.
        arguments = {"body": body, "request": Request(scope, receive)}
        await self._answer(SUBMIT, scope, receive, send, arguments, principal=True)

    async def _read(self, scope: Scope, receive: Receive, send: Send, execution_id: str) -> None:
        query = _query(scope, frozenset({"wait"}))
        wait = _wait(query)
        if wait is None:
            await self.app(scope, receive, send)
            return
        arguments = {"execution_id": execution_id, "wait": wait}
        await self._answer(READ, scope, receive, send, arguments, principal=True)

    async def _output(self, scope: Scope, receive: Receive, send: Send, execution_id: str) -> None:
        query = _query(scope, frozenset({"offset", "limit"}))
        window = _window(query)
        if window is None:
            await self.app(scope, receive, send)
            return
        offset, limit = window
        arguments = {"execution_id": execution_id, "offset": offset, "limit": limit}
        await self._answer(OUTPUT, scope, receive, send, arguments, principal=True)

    async def _answer(
        self,
        route: APIRoute,
        scope: Scope,
        receive: Receive,
        send: Send,
        arguments: dict[str, Any],
        *,
        principal: bool = False,
    ) -> None:
        # What FastAPI's router leaves in the scope: the request metrics and the access log
        # name the route template, tracing reads the route too.
        scope["route"] = route
        scope["endpoint"] = route.endpoint
        if "execution_id" in arguments:
            scope["path_params"] = {"execution_id": arguments["execution_id"]}
        response: Response
        try:
            if principal:
                connection = HTTPConnection(scope)
                services = await deps.get_services(connection)  # type: ignore[arg-type]
                credentials = await deps._bearer(connection)
                arguments["principal"] = await deps.get_principal(services, credentials)
                arguments["services"] = services
            result = await route.endpoint(**arguments)
        except AppError as error:
            response = app_error_response(error)
        else:
            response = result if isinstance(result, Response) else _serialised(route, result)
        await response(scope, receive, send)


def _validated_body(scope: Scope, body: bytes) -> Any:
    """The submit's body as FastAPI would hand it to the endpoint, or None when FastAPI should
    judge it (and refuse it with its own 422)."""
    if not body or _header(scope, b"content-type") not in _JSON_TYPES:
        return None
    assert SUBMIT.body_field is not None
    try:
        parsed = loads_strict(body)
    except ValueError:
        return None
    value, errors = SUBMIT.body_field.validate(parsed, {}, loc=("body",))
    return None if errors else value


def _wait(query: dict[str, str] | None) -> float | None:
    if query is None:
        return None
    text = query.get("wait")
    if text is None:
        return 0.0
    if not _DECIMAL.match(text):
        return None
    wait = float(text)
    return wait if math.isfinite(wait) and wait <= 600 else None


def _window(query: dict[str, str] | None) -> tuple[int, int] | None:
    if query is None:
        return None
    offset_text = query.get("offset", "0")
    limit_text = query.get("limit", str(executions.DEFAULT_OUTPUT_READ))
    if not (_DIGITS.match(offset_text) and _DIGITS.match(limit_text)):
        return None
    limit = int(limit_text)
    if not 1 <= limit <= executions.MAX_OUTPUT_READ:
        return None
    return int(offset_text), limit


def _serialised(route: APIRoute, result: Any) -> Response:
    """The endpoint's return value through its response model, as FastAPI serialises it."""
    field = route.response_field
    assert field is not None
    value, errors = field.validate(result, {}, loc=("response",))
    if errors:  # a bug in the endpoint: FastAPI would raise ResponseValidationError too
        raise RuntimeError(f"{route.path} answered outside its response model: {errors}")
    return Response(
        field.serialize_json(value),
        media_type="application/json",
        status_code=route.status_code or 200,
    )
