"""Health, readiness, info, metrics and the tool object."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app import __version__
from app.api.deps import AdminDep, PrincipalDep, ServicesDep
from app.api.errors import app_error_response, error_responses
from app.api.operation_ids import operation_id
from app.api.strict_route import StrictJsonRoute
from app.core.errors import AppError, DatabaseUnavailableError, ShuttingDownError, StorageFullError
from app.executions.tool_description import execution_tool
from app.schemas import (
    Caller,
    EnvironmentInfo,
    Health,
    Info,
    NodePublic,
    NodesPublic,
    Readiness,
    ToolObject,
)
from app.schemas.sandbox import SandboxInfo
from app.services import Services
from app.store import crud

router = APIRouter(
    generate_unique_id_function=operation_id, tags=["operations"], route_class=StrictJsonRoute
)


@router.get("/healthz", response_model=Health, summary="The process is up")
async def healthz() -> Health:
    """Liveness: answers while the event loop runs. Open (no token)."""
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=Readiness,
    responses=error_responses(
        503,
        described={
            503: "Not ready for new work: the server is stopping (`shutting_down`), the "
            "database does not answer (`database_unavailable`) or the data directory is full "
            "(`storage_full`)."
        },
    ),
    summary="Ready for new work: not stopping, the database answers, the data directory has room",
)
async def readyz(services: ServicesDep) -> Any:
    """Readiness: 200 while the server is not stopping, a `SELECT 1` reaches the database and
    the data directory has room. Open (no token)."""
    problem = await _readiness_problem(services)
    if problem is not None:
        # Always 503 here (a full disk included): readiness is about routing traffic away.
        response = app_error_response(problem)
        response.status_code = 503
        response.headers["Retry-After"] = "5"
        return response
    return Readiness(status="ok", recovery="running" if services.recovery.running else "done")


async def _readiness_problem(services: Services) -> AppError | None:
    if services.executions.stopping:
        return ShuttingDownError()
    if not await anyio.to_thread.run_sync(services.storage.has_room):
        return StorageFullError()
    try:
        await services.db.call(crud.ping)
    except Exception:
        return DatabaseUnavailableError()
    return None


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {
            "content": {CONTENT_TYPE_LATEST.split(";")[0]: {"schema": {"type": "string"}}},
            "description": "Prometheus text exposition.",
        },
        **error_responses(401),
    },
    summary="Prometheus metrics",
)
async def metrics(_: PrincipalDep, services: ServicesDep) -> Response:
    """Requests by route template and status, executions by state with durations and output
    bytes, policy verdicts, pending approvals and their wait, WebSocket viewers, running
    jobs, process and build info (README: Metrics). Any token."""
    return Response(generate_latest(services.metrics.registry), media_type=CONTENT_TYPE_LATEST)


@router.get(
    "/v1/info", response_model=Info, responses=error_responses(401), summary="Version and limits"
)
async def info(principal: PrincipalDep, services: ServicesDep) -> Info:
    """The server version, who the token names, the job cap and running jobs, and the limits a
    client should respect (command size, timeouts, inline output window, artifact cap)."""
    settings = services.settings
    return Info(
        version=__version__,
        caller=Caller(name=principal.name, role=principal.role),
        node=services.cluster.node_id,
        max_jobs=settings.max_jobs,
        running_jobs=services.registry.running_jobs,
        cluster_running_jobs=await services.cluster.running_jobs(),
        limits={
            "max_command_bytes": settings.max_command_bytes,
            "default_timeout_seconds": 300,
            "timeout_range_seconds": [1, 3600],
            "max_timeout_seconds": settings.max_timeout or 3600,
            "auto_background_ms": settings.auto_background_ms,
            "approval_timeout_seconds": settings.approval_timeout,
            "max_pending_approvals": settings.max_pending_approvals,
            "artifact_max_bytes": settings.artifact_max_bytes,
            "inline_head_bytes": 20 * 1024,
            "inline_tail_bytes": 50 * 1024,
            "max_line_bytes": 768,
            "retention_days": settings.retention_days,
            "ws_ping_seconds": settings.ws_ping_seconds,
            "kill_grace_seconds": settings.kill_grace_seconds,
        },
        confinement=services.confinement.name,
        execution_limits=services.confinement.ceiling.as_dict(),
        total_limits={
            "memory_mb": services.confinement.totals.memory_mb,
            "processes": services.confinement.totals.processes,
        },
        sandbox=SandboxInfo.model_validate(services.sandbox.status()),
        environment=EnvironmentInfo(
            inherit=settings.command_env_inherit,
            exclude=settings.command_env_exclude,
            passed=settings.command_env_pass,
        ),
        oidc_issuer=services.tokens.oidc.issuer if services.tokens.oidc else None,
    )


@router.get(
    "/v1/nodes",
    response_model=NodesPublic,
    responses=error_responses(401, 403),
    summary="The replicas sharing this database",
)
async def nodes(_: AdminDep, services: ServicesDep) -> NodesPublic:
    """Every replica that registered in this database, with its internal URL and last
    heartbeat; `alive` while that is within `SHELLGATE_NODE_TIMEOUT`. Admin only."""
    current = services.cluster.node_id
    return NodesPublic(
        data=[
            NodePublic(
                id=node.id,
                url=node.url,
                version=node.version,
                started_at=node.started_at,
                last_heartbeat=node.last_heartbeat,
                alive=node.alive,
                stopping=node.stopping,
                current=node.id == current,
            )
            for node in await services.cluster.nodes()
        ]
    )


@router.get(
    "/v1/tool",
    response_model=ToolObject,
    responses=error_responses(401),
    summary="MCP tool object for /v1/executions",
)
async def tool(_: PrincipalDep, services: ServicesDep) -> ToolObject:
    """`{name, description, inputSchema}` describing `POST /v1/executions` for an agent
    framework, with this server's limits in the description."""
    return ToolObject.model_validate(execution_tool(services.settings))
