"""The `/mcp` route, started on its first request: the MCP SDK (≈ 0.5 s of imports and 25 MiB)
is loaded, and its session manager run, only once an MCP client calls. Until then a server
that only serves REST never pays for it.

The SDK is imported in a worker thread (the event loop keeps serving meanwhile); concurrent
first requests wait for the same start. The session manager runs in a task of its own until
the app's lifespan ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import anyio.to_thread
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.errors import app_error_response
from app.core.errors import UnavailableError

if TYPE_CHECKING:
    from app.services import Services

MCP_PATH = "/mcp"  # app/api/mcp/server.py's MCP_PATH (tests/api/test_mcp.py checks they agree)
MCP_MODULE = "app.api.mcp.server"


class LazyMcpEndpoint:
    """The ASGI app routed at `/mcp`: `app.api.mcp.server.McpEndpoint`, built and served on the
    first request that reaches it while the app runs; 503 before the lifespan or after it."""

    def __init__(self) -> None:
        self._services: Services | None = None
        self._endpoint: ASGIApp | None = None
        self._starting: asyncio.Task[ASGIApp] | None = None
        self._runner: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    @property
    def started(self) -> bool:
        return self._endpoint is not None

    @contextlib.asynccontextmanager
    async def serve(self, services: Services) -> AsyncIterator[None]:
        """For as long as the app's lifespan lasts: the first request may start the endpoint;
        a started endpoint is stopped at the end."""
        self._stop = asyncio.Event()  # one per lifespan: an app may be started again
        self._services = services
        try:
            yield
        finally:
            self._services = None
            self._endpoint = None
            self._stop.set()
            tasks, self._starting, self._runner = (self._starting, self._runner), None, None
            for task in tasks:
                if task is not None:
                    with contextlib.suppress(Exception, asyncio.CancelledError):
                        await task

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = self._endpoint
        if endpoint is None:
            if self._services is None:
                error = UnavailableError("the MCP endpoint is not running")
                await app_error_response(error)(scope, receive, send)
                return
            if self._starting is None:
                self._starting = asyncio.create_task(self._start(self._services))
            endpoint = await asyncio.shield(self._starting)
        await endpoint(scope, receive, send)

    async def _start(self, services: Services) -> ASGIApp:
        module = await anyio.to_thread.run_sync(importlib.import_module, MCP_MODULE)
        if self._services is not services:
            self._starting = None
            raise UnavailableError("the MCP endpoint is not running")
        endpoint: ASGIApp = module.McpEndpoint()
        serving = asyncio.Event()

        async def run() -> None:
            async with endpoint.serve(services):  # type: ignore[attr-defined]
                serving.set()
                await self._stop.wait()

        self._runner = asyncio.create_task(run())
        ready = asyncio.create_task(serving.wait())
        await asyncio.wait({self._runner, ready}, return_when=asyncio.FIRST_COMPLETED)
        if not serving.is_set():
            ready.cancel()
            self._starting = None  # the next request tries again
            self._runner.result()  # raises what stopped it
        self._endpoint = endpoint
        return endpoint
