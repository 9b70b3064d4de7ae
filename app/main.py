"""`create_app(settings)`: the FastAPI app, its lifespan and its middleware."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.staticfiles import StaticFiles
from starlette.routing import Route

from app import __version__
from app.api.body_limit import LimitRequestBodies
from app.api.description import API_DESCRIPTION
from app.api.errors import install_error_handlers
from app.api.hot_routes import LeanHotRoutes
from app.api.mcp.mount import MCP_PATH, LazyMcpEndpoint
from app.api.middleware import RequestObservationMiddleware
from app.api.openapi_examples import install_examples
from app.api.operation_ids import operation_id
from app.api.router import API_ROUTES, allowed_methods
from app.api.routes.web import XTERM_DIR
from app.api.stopping import RefuseNewWorkWhileStopping
from app.cluster.forwarding import ForwardToOwner
from app.core.config import Settings
from app.core.strict_json import json_body_limit
from app.observability.metrics import Metrics
from app.observability.tracing import Tracing
from app.server.stop_signal import StopSignal
from app.services import Services

logger = logging.getLogger("shellgate")


def create_app(settings: Settings, *, tracing: Tracing | None = None) -> FastAPI:
    """The app. `tracing` defaults to what the OTEL_* environment asks for (off when
    OTEL_EXPORTER_OTLP_ENDPOINT is unset)."""
    mcp = LazyMcpEndpoint()
    metrics = Metrics()
    tracing = tracing if tracing is not None else Tracing.from_environment()
    stop_signal = StopSignal()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with Services.run(settings, metrics, tracing) as services:
            app.state.services = services
            stop_signal.bind(
                asyncio.get_running_loop(), services.begin_stop, announce=services.cluster.leave
            )
            async with mcp.serve(services):
                yield

    app = FastAPI(
        title="shellgate",
        version=__version__,
        description=API_DESCRIPTION,
        lifespan=lifespan,
        generate_unique_id_function=operation_id,
        # Spans come from app/observability/tracing.py (README, "Tracing"); FastAPI's own
        # telemetry would only duplicate them, and it looks up the global OpenTelemetry
        # providers on every request to learn that it is off.
        telemetry={"tracing": False, "metrics": False, "logs": False, "operation_spans": False},
        # The root path (SHELLGATE_ROOT_PATH) is the server's business: `shellgate serve`
        # hands it to uvicorn, FastAPI's own `root_path` argument being deprecated.
    )
    app.state.stop_signal = stop_signal
    # Innermost of the app's own layers (inside CORS, the stopping refusal, forwarding and the
    # request observation): the hot requests skip only FastAPI's routing and dependencies.
    app.add_middleware(LeanHotRoutes)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["*"],
            allow_headers=[
                "Authorization",
                "Content-Type",
                "Mcp-Session-Id",
                "Mcp-Protocol-Version",
                "Last-Event-ID",
            ],
            expose_headers=[
                "X-Total-Bytes",
                "X-Complete",
                "X-Next-Offset",
                "X-Offset",
                "X-Request-ID",
                "X-Execution-Id",
                "Retry-After",
                "Mcp-Session-Id",
            ],
        )
    install_error_handlers(app, allowed_methods)
    install_examples(app, API_ROUTES)
    # What needs another replica's process goes there (app/cluster/forwarding.py).
    app.add_middleware(ForwardToOwner)
    # A body has a size cap, checked before anything reads it (FastAPI parses a body before
    # the token's check, forwarding reads a submit's): app/api/body_limit.py.
    app.add_middleware(LimitRequestBodies, max_bytes=json_body_limit(settings.max_command_bytes))
    # Inside the request middleware: a refusal while stopping gets its request id and log line;
    # outside the others, so that a request cut short by the stop (its body still arriving, or
    # on its way to another replica) is answered too.
    app.add_middleware(RefuseNewWorkWhileStopping)
    # Outermost but for the tracing middleware: the request id is set before anything logs.
    app.add_middleware(RequestObservationMiddleware, metrics=metrics, tracing=tracing)
    tracing.instrument(app)
    # The routes as built at import, not `include_router`, which builds them all again
    # (app/api/router.py says why that matters).
    app.router.routes.extend(API_ROUTES)
    # A route, not a mount: the endpoint is exactly `/mcp` (a mount answers only `/mcp/…`).
    app.router.routes.append(Route(MCP_PATH, mcp, include_in_schema=False))
    if XTERM_DIR.is_dir():  # `make console-deps`; without it the console shows a plain log
        app.mount("/console/vendor/xterm", StaticFiles(directory=XTERM_DIR), name="xterm")
    else:
        logger.warning(
            "the console's terminal (xterm.js) is not installed at %s: it shows a plain log "
            "(`make console-deps`)",
            XTERM_DIR,
        )
    return app
