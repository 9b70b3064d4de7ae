"""The route class of every API router: request bodies go through `app.core.strict_json`.

FastAPI parses a JSON body with `Request.json()`; this request class swaps in the strict
parser, so that a non-standard constant, an out-of-range number or a lone surrogate is a 422
(`json_invalid`) before any handler runs, on every route at once.

It also bounds the body (`json_body_limit`): the parse runs on the event loop, and before it
the whole body sits in memory, so a body of any size stalled every other client (64 MiB:
0.4 s) and grew the server by its size. A larger one is refused with 413 `too_large` as soon
as `Content-Length` or the bytes received pass the limit.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.routing import APIRoute

from app.core.strict_json import json_body_limit, loads_strict

__all__ = ["StrictJsonRequest", "StrictJsonRoute", "json_body_limit"]

_DEFAULT_MAX_COMMAND_BYTES = 64 * 1024


class StrictJsonRequest(Request):
    async def body(self) -> bytes:
        if not hasattr(self, "_body"):
            limit = self._limit()
            declared = self.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                raise _too_large(limit)
            chunks: list[bytes] = []
            size = 0
            async for chunk in self.stream():
                size += len(chunk)
                if size > limit:
                    raise _too_large(limit)
                chunks.append(chunk)
            self._body = b"".join(chunks)
        return self._body

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = loads_strict(await self.body())
        return self._json

    def _limit(self) -> int:
        services = getattr(self.app.state, "services", None)
        settings = getattr(services, "settings", None)
        return json_body_limit(getattr(settings, "max_command_bytes", _DEFAULT_MAX_COMMAND_BYTES))


def _too_large(limit: int) -> HTTPException:
    return HTTPException(413, f"The request body is larger than {limit} bytes.")


class StrictJsonRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Response:
            return await handler(StrictJsonRequest(request.scope, request.receive))

        return strict_handler
