"""Health, readiness, info, metrics and the tool object."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app import __version__, crud
from app.api.deps import PrincipalDep, ServicesDep
from app.api.errors import error_body, error_responses
from app.schemas import Health, Info, ToolObject
from app.tool_description import execution_tool

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health, summary="The process is up")
async def healthz() -> Health:
    """Liveness: answers while the event loop runs. Open (no token)."""
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=Health,
    responses=error_responses(503, described={503: "The database does not answer."}),
    summary="The database answers",
)
async def readyz(services: ServicesDep) -> Any:
    """Readiness: 200 once a `SELECT 1` reaches the database. Open (no token)."""
    try:
        await services.db.call(crud.ping)
    except Exception:
        return JSONResponse(
            error_body("unavailable", "database unavailable"),
            status_code=503,
        )
    return Health(status="ok")


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
async def info(_: PrincipalDep, services: ServicesDep) -> Info:
    """The server version, the job cap and running jobs, and the limits a client should
    respect (command size, timeouts, inline output window, artifact cap)."""
    settings = services.settings
    return Info(
        version=__version__,
        max_jobs=settings.max_jobs,
        running_jobs=services.registry.running_jobs,
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
