"""The hot reads answered without FastAPI's routing and dependency solving.

`GET /v1/executions/{id}` (with `?wait`), its `/output` and `/healthz` are what an agent polls.
For them FastAPI walks its included routers, builds a dependency graph's values, re-checks the
request against every parameter and wraps the endpoint in two more layers: measured again
(bench/PROFILE.md, "Lean hot routes, measured again"), this layer saves about a quarter of the
server's CPU on a read and half on `/healthz`. It no longer takes the submit: there it saved
2-10 %, below what is worth a second path, and it needed FastAPI's private body validation.

This layer, the innermost of the app's own middlewares, recognises those requests by method
and path and calls the very same endpoint functions with the same bearer-token dependency;
responses go through the route's declared response model with pydantic's public API. It takes
a request only when its query is certainly valid: parameters of the plain forms the routes
document, in range. Anything else (an unknown or repeated parameter, a value out of range)
goes on to FastAPI, so every 422 keeps FastAPI's own shape and message. Domain errors
(`AppError`) get the app's error envelope here, through the same `app_error_response` as the
exception handler. `openapi.json` does not change: the routes are still declared, and still
serve whatever this layer passes on.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from fastapi.routing import APIRoute
from pydantic import TypeAdapter
from starlette.requests import HTTPConnection
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api import deps
from app.api.errors import app_error_response
from app.api.routes import executions, health
from app.core.errors import AppError

_EXECUTION = re.compile(r"^/v1/executions/([^/]+)$")
_OUTPUT = re.compile(r"^/v1/executions/([^/]+)/output$")
_DIGITS = re.compile(r"^[0-9]{1,15}$")
_DECIMAL = re.compile(r"^[0-9]{1,9}(?:\.[0-9]{1,9})?$")


def _route(router_routes: list[Any], endpoint: Callable[..., Any]) -> APIRoute:
    for route in router_routes:
        if isinstance(route, APIRoute) and route.endpoint is endpoint:
            return route
    raise LookupError(f"no route serves {endpoint.__name__}")


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


def _route_path(scope: Scope) -> str:
    """The path the app's routes match: the request's path without the prefix a proxy
    mounted the app under (`root_path`), as Starlette's router reads it."""
    path: str = scope["path"]
    root_path: str = scope.get("root_path", "")
    if root_path and path.startswith(root_path + "/"):
        return path[len(root_path) :]
    return path  # a path that only looks alike (`/api` and `/apiv1`) is not under the mount


class LeanHotRoutes:
    """ASGI middleware; passes on every request it does not answer itself."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["app"].dependency_overrides:
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        path = _route_path(scope)
        if method == "GET":
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
                credentials = await deps.bearer_scheme(connection)
                arguments["principal"] = await deps.get_principal(services, credentials)
                arguments["services"] = services
            result = await route.endpoint(**arguments)
        except AppError as error:
            response = app_error_response(error)
        else:
            response = result if isinstance(result, Response) else _serialised(route, result)
        await response(scope, receive, send)


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
    """The endpoint's return value through its declared response model, as FastAPI answers
    it: validated against the model, serialised by alias."""
    adapter = _RESPONSE_ADAPTERS[route.path]
    value = adapter.validate_python(result, from_attributes=True)
    return Response(
        adapter.dump_json(value, by_alias=True),
        media_type="application/json",
        status_code=route.status_code or 200,
    )


# Built once: a TypeAdapter compiles its model's validator and serialiser.
_RESPONSE_ADAPTERS: dict[str, TypeAdapter[Any]] = {
    route.path: TypeAdapter(route.response_model)
    for route in (READ, HEALTHZ)
    if route.response_model is not None
}
