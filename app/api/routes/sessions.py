"""`/v1/sessions`: persistent shells and the streaming runner (SPEC §6)."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import StreamingResponse

from app.api.deps import PrincipalDep, ServicesDep
from app.api.errors import error_responses
from app.schemas import (
    RunItem,
    RunRequest,
    SessionCreate,
    SessionPatch,
    SessionPublic,
    SessionsPublic,
    ToolObject,
)

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])
ERRORS = error_responses(401, 403, 404, 422)
NDJSON = "application/x-ndjson"


@router.post(
    "", status_code=201, response_model=SessionPublic, responses=ERRORS, summary="Open a session"
)
async def create_session(
    body: SessionCreate, principal: PrincipalDep, services: ServicesDep
) -> SessionPublic:
    return await services.sessions.create(principal, body)


@router.get("", response_model=SessionsPublic, responses=ERRORS, summary="List sessions")
async def list_sessions(principal: PrincipalDep, services: ServicesDep) -> SessionsPublic:
    return SessionsPublic(data=await services.sessions.list_for(principal))


@router.get("/{session_id}", response_model=SessionPublic, responses=ERRORS, summary="Read one")
async def get_session(
    session_id: str, principal: PrincipalDep, services: ServicesDep
) -> SessionPublic:
    return await services.sessions.get(principal, session_id)


@router.patch(
    "/{session_id}",
    response_model=SessionPublic,
    responses=ERRORS,
    summary="Change cwd, env, timeout_ms or pty (a new env also resets the shell state)",
)
async def patch_session(
    session_id: str, body: SessionPatch, principal: PrincipalDep, services: ServicesDep
) -> SessionPublic:
    return await services.sessions.patch(principal, session_id, body)


@router.delete(
    "/{session_id}",
    status_code=204,
    responses=ERRORS,
    summary="End the session and cancel its running calls",
)
async def delete_session(
    session_id: str, principal: PrincipalDep, services: ServicesDep
) -> Response:
    await services.sessions.delete(principal, session_id)
    return Response(status_code=204)


@router.get(
    "/{session_id}/tool",
    response_model=ToolObject,
    responses=ERRORS,
    summary="MCP tool object `bash_run` for this session's runner",
)
async def session_tool(
    session_id: str, principal: PrincipalDep, services: ServicesDep
) -> ToolObject:
    return ToolObject.model_validate(await services.sessions.tool(principal, session_id))


@router.post(
    "/{session_id}/run",
    response_class=StreamingResponse,
    responses={
        **ERRORS,
        200: {
            "content": {NDJSON: {"schema": RunItem.model_json_schema()}},
            "description": "NDJSON items, one per line: data items (one non-empty chunk of "
            "stdout or stderr, no status), then one status item (exit_code, or signal; "
            "signal -1 = timed out). Header X-Execution-Id names the execution.",
        },
    },
    summary="Run a command in the session and stream its output (the streaming runner)",
)
async def run_in_session(
    session_id: str, body: RunRequest, principal: PrincipalDep, services: ServicesDep
) -> StreamingResponse:
    stream = await services.session_runs.run(principal, session_id, body)
    return StreamingResponse(
        stream.items,
        media_type=NDJSON,
        headers={"X-Execution-Id": stream.execution_id, "Cache-Control": "no-store"},
    )
