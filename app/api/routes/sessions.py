"""`/v1/sessions`: persistent shells and the streaming runner (docs/streaming.md#sessions)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from app.api.deps import PrincipalDep, ServicesDep
from app.api.disconnect import caller_gone
from app.api.errors import error_responses
from app.api.operation_ids import operation_id
from app.api.strict_route import StrictJsonRoute
from app.schemas import (
    RunRequest,
    SessionCreate,
    SessionPatch,
    SessionPending,
    SessionPublic,
    SessionsPublic,
    ToolObject,
)

router = APIRouter(
    generate_unique_id_function=operation_id,
    prefix="/v1/sessions",
    tags=["sessions"],
    route_class=StrictJsonRoute,
)
NDJSON = "application/x-ndjson"
_NOT_FOUND = "No such session, or another agent's (`not_found`)."
_FORBIDDEN = "Approvers may read sessions but not use or change them (`forbidden`)."
_LOST = (
    "With several replicas: the replica holding the session's shell stopped heartbeating, so "
    "the session and its state are gone (`session_lost`, `details.node` names the replica)."
)
_FORBIDDEN_OR_ENV = (
    "Approvers may read sessions but not use or change them (`forbidden`); the policy's env "
    "rules deny a name of `env` (`policy_denied`, `Blocked environment variable: <NAME>`; "
    "nothing is stored)."
)


@router.post(
    "",
    status_code=201,
    response_model=SessionPublic,
    responses={
        202: {
            "model": SessionPending,
            "description": "Its `sandbox` asks beyond the policy's profile and awaits an "
            "approval; send the same request again with `approval_id` once it is approved.",
        },
        **error_responses(
            400,
            401,
            403,
            404,
            409,
            422,
            429,
            described={
                403: _FORBIDDEN_OR_ENV,
                404: "`approval_id` names no session request of this caller's (`not_found`).",
                409: "`approval_id` names an approval already used, or one for another sandbox.",
                429: "The owner has `SHELLGATE_MAX_SESSIONS` open sessions "
                "(`session_limit_reached`, header `Retry-After`); closing one frees a place.",
            },
        ),
    },
    summary="Open a session",
)
async def create_session(
    body: SessionCreate, principal: PrincipalDep, services: ServicesDep
) -> SessionPublic | JSONResponse:
    """A persistent shell for a sequence of calls: exported variables, functions and aliases
    carry over from one call to the next (`POST /v1/executions` with `session`, or the
    streaming runner `POST /v1/sessions/{id}/run`). `tool` is the MCP tool `bash_run`.
    A `sandbox` beyond the policy's profile waits for an approval (202 while it does)."""
    created = await services.sessions.create(principal, body)
    if isinstance(created, SessionPending):
        return JSONResponse(created.model_dump(mode="json"), status_code=202)
    return created


@router.get(
    "", response_model=SessionsPublic, responses=error_responses(401), summary="List sessions"
)
async def list_sessions(principal: PrincipalDep, services: ServicesDep) -> SessionsPublic:
    """Agents see their own sessions; approvers and admins all."""
    return SessionsPublic(data=await services.sessions.list_for(principal))


@router.get(
    "/{session_id}",
    response_model=SessionPublic,
    responses=error_responses(401, 404, 410, described={404: _NOT_FOUND, 410: _LOST}),
    summary="Read one session",
)
async def get_session(
    session_id: str, principal: PrincipalDep, services: ServicesDep
) -> SessionPublic:
    """The session; `busy` is true while a call holds its shell state."""
    return await services.sessions.get(principal, session_id)


@router.patch(
    "/{session_id}",
    response_model=SessionPublic,
    responses=error_responses(
        400,
        401,
        403,
        404,
        410,
        422,
        described={403: _FORBIDDEN_OR_ENV, 404: _NOT_FOUND, 410: _LOST},
    ),
    summary="Change cwd, env, timeout_ms or pty (a new env also resets the shell state)",
)
async def patch_session(
    session_id: str, body: SessionPatch, principal: PrincipalDep, services: ServicesDep
) -> SessionPublic:
    """Fields left out keep their value; `env` replaces the whole environment and resets the
    saved shell state. The tool description is regenerated."""
    return await services.sessions.patch(principal, session_id, body)


@router.delete(
    "/{session_id}",
    status_code=204,
    responses=error_responses(
        401, 403, 404, 410, described={403: _FORBIDDEN, 404: _NOT_FOUND, 410: _LOST}
    ),
    summary="End the session and cancel its running calls",
)
async def delete_session(
    session_id: str, principal: PrincipalDep, services: ServicesDep
) -> Response:
    """Cancels the session's running calls and removes its saved state; later use is 404."""
    await services.sessions.delete(principal, session_id)
    return Response(status_code=204)


@router.get(
    "/{session_id}/tool",
    response_model=ToolObject,
    responses=error_responses(401, 404, 410, described={404: _NOT_FOUND, 410: _LOST}),
    summary="MCP tool object `bash_run` for this session's runner",
)
async def session_tool(
    session_id: str, principal: PrincipalDep, services: ServicesDep
) -> ToolObject:
    """`{name: bash_run, description, inputSchema}`: the runner as an agent tool, with the
    session's timeout in the description."""
    return ToolObject.model_validate(await services.sessions.tool(principal, session_id))


@router.post(
    "/{session_id}/run",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {NDJSON: {"schema": {"type": "string"}}},
            "description": "NDJSON, one object per line, each `{stdout, stderr, exit_code, "
            "signal, truncated}` (plus `encoding: base64` when a chunk is not UTF-8): data "
            "items (one non-empty chunk of stdout or stderr, no status), then one status item "
            "(`exit_code`, or `signal`; signal -1 = timed out).",
            "headers": {
                "X-Execution-Id": {
                    "description": "The execution this call created (`GET /v1/executions/"
                    "{id}`, its `/output`, its stream).",
                    "schema": {"type": "string"},
                }
            },
        },
        **error_responses(
            400,
            401,
            403,
            404,
            409,
            410,
            422,
            429,
            described={
                410: _LOST,
                403: "Approvers may not run in sessions (`forbidden`); the policy or a guard "
                "pattern denied the command, or the env rules deny a name of the session's "
                "env (`policy_denied`), or an approver did (`approval_rejected`).",
                429: "The caller already has `SHELLGATE_MAX_PENDING_APPROVALS` approvals "
                "pending (`pending_approval_limit`, header `Retry-After`).",
                404: _NOT_FOUND,
                409: "The call was cancelled while it awaited approval (`conflict`).",
                422: 'Malformed body (`{"detail"}`), or refused (`invalid_request`): '
                "`timeout_ms` not above the session's, a command starting with `/`.",
            },
        ),
    },
    summary="Run a command in the session and stream its output (the streaming runner)",
)
async def run_in_session(
    session_id: str,
    body: RunRequest,
    principal: PrincipalDep,
    services: ServicesDep,
    request: Request,
) -> StreamingResponse:
    """Runs `command` in the session under the policy and streams its output as NDJSON while
    it runs; every check happens before the first byte, so a refusal is a plain JSON error.
    The call never turns into a background job; the client's disconnect cancels it."""
    gone = caller_gone(request.receive)  # its body read: only the disconnect is left to hear
    stream = await services.session_runs.run(principal, session_id, body, caller_gone=gone)
    return StreamingResponse(
        stream.items,
        media_type=NDJSON,
        headers={"X-Execution-Id": stream.execution_id, "Cache-Control": "no-store"},
    )
