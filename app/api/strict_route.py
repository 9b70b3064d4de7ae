"""The route class of every API router: request bodies go through `app.strict_json`.

FastAPI parses a JSON body with `Request.json()`; this request class swaps in the strict
parser, so that a non-standard constant, an out-of-range number or a lone surrogate is a 422
(`json_invalid`) before any handler runs, on every route at once.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from app.strict_json import loads_strict


class StrictJsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = loads_strict(await self.body())
        return self._json


class StrictJsonRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Response:
            return await handler(StrictJsonRequest(request.scope, request.receive))

        return strict_handler
