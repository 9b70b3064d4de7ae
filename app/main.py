"""`create_app(settings)`: the FastAPI app, its lifespan and its middleware."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from datetime import timedelta

import anyio.to_thread
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
from app.api.router import API_ROUTES, allowed_methods, api_router
from app.api.routes.web import XTERM_DIR
from app.api.stopping import RefuseNewWorkWhileStopping
from app.cluster.forwarding import ForwardToOwner
from app.cluster.heartbeat import heartbeat_forever
from app.core.config import Settings
from app.core.strict_json import json_body_limit
from app.executions.pending_record import recover_pending_records
from app.executions.recovery import (
    prune_expired,
    recover_lost_executions,
    recover_lost_while_silent,
)
from app.observability.metrics import Metrics
from app.observability.tracing import Tracing
from app.output.sink_worker import WINDOW_PROCESS
from app.process.reserved_signals import restore_reserved_signals
from app.server.memory_trim import trim_memory_when_idle
from app.server.stop_signal import StopSignal
from app.services import Services
from app.store.migrate import upgrade_if_behind

logger = logging.getLogger("shellgate")


async def _prune_forever(services: Services) -> None:
    while True:
        try:
            await prune_expired(services.db, services.settings)
            # Replicas gone as long as the records they ran are kept: nothing points at them.
            await services.cluster.forget_silent(timedelta(days=services.settings.retention_days))
        except Exception:
            logger.exception("retention pruning failed")
        await asyncio.sleep(services.settings.prune_interval_seconds)


def create_app(settings: Settings, *, tracing: Tracing | None = None) -> FastAPI:
    """The app. `tracing` defaults to what the OTEL_* environment asks for (off when
    OTEL_EXPORTER_OTLP_ENDPOINT is unset)."""
    mcp = LazyMcpEndpoint()
    metrics = Metrics()
    tracing = tracing if tracing is not None else Tracing.from_environment()
    stop_signal = StopSignal()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Before any child is started: they would inherit them ignored.
        restore_reserved_signals()
        services = Services.build(settings, metrics, tracing)
        # Before anything can run: with the sandbox on and unbuildable, the server must not
        # start (`shellgate serve` says why before this; an embedded app fails here).
        await anyio.to_thread.run_sync(services.sandbox.check)
        if not services.sandbox.enforced:
            logger.warning("SHELLGATE_SANDBOX=off: commands run unsandboxed (docs/sandbox.md)")
        await anyio.to_thread.run_sync(
            upgrade_if_behind, services.db.engine, settings.resolved_database_url
        )
        await services.policy.load()
        await services.cluster.join()
        # Runs a dead server recorded only as intents first become `running` rows, which
        # the recovery below kills and records `lost` like any other.
        await anyio.to_thread.run_sync(
            recover_pending_records, services.db, services.executions.intents
        )
        lost = await recover_lost_executions(
            services.db, services.settings, later=services.recovery
        )
        if lost:
            logger.warning("%d executions were lost by a previous run", len(lost))
        # What the other replicas recorded `lost` meanwhile: ended and re-read here, the only
        # place its processes and its log (data directories not shared) can be reached.
        await recover_lost_while_silent(
            services.db, services.settings, services.cluster.previous_beat, services.recovery
        )
        # Before the restore, which would start a decided one for nobody.
        orphaned = await services.executions.withdraw_orphaned_streamed()
        if orphaned:
            logger.warning("%d runner calls awaiting approval were withdrawn", orphaned)
        await services.approvals.restore()
        if settings.spawn_ahead:
            services.confinement.start_spawning_ahead(
                settings.shell,
                services.settings.data_dir,
                settings.command_nice,
                sandbox=services.sandbox.standby_prefix(),
                count=settings.spawn_ahead_shells,
            )
        # After the lost executions are recorded: their ends are due too.
        await services.notifier.start()
        app.state.services = services

        def begin_stop() -> None:
            services.executions.begin_shutdown()
            # A long command's reading under way would hold its request past uvicorn's cut
            # (its thread runs to its end): ended now, it is a limit, answered as such.
            services.policy.stop_reading()

        stop_signal.bind(asyncio.get_running_loop(), begin_stop)
        background = [
            asyncio.create_task(_prune_forever(services)),
            asyncio.create_task(
                heartbeat_forever(services.cluster, services.db, services.settings)
            ),
            asyncio.create_task(services.relay.run()),
            asyncio.create_task(trim_memory_when_idle(services.registry.live)),
            # Start-up does not wait on old logs: re-read while the server already answers.
            asyncio.create_task(services.recovery.run(services.db, services.settings)),
        ]
        try:
            async with mcp.serve(services):
                yield
        finally:
            for task in background:
                task.cancel()
            # uvicorn gave open requests half the grace already (app/server/serving.py).
            await services.executions.shutdown(within=settings.shutdown_grace * 0.3)
            await services.relay.close()
            await services.cluster.drain()
            await services.forwarder.close()
            await services.approvals.close()
            await services.approval_notifier.close()
            await services.notifier.close()
            await services.policy.close()
            await anyio.to_thread.run_sync(WINDOW_PROCESS.close)
            services.db.dispose()
            tracing.shutdown()

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
    app.include_router(api_router)
    # A route, not a mount: the endpoint is exactly `/mcp` (a mount answers only `/mcp/…`).
    app.router.routes.append(Route(MCP_PATH, mcp, include_in_schema=False))
    if XTERM_DIR.is_dir():  # `make console-deps`; without it the console shows a plain log
        app.mount("/console/vendor/xterm", StaticFiles(directory=XTERM_DIR), name="xterm")
    return app
