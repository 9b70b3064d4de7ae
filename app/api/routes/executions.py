"""`/v1/executions`: run, list, read, wait, cancel, output, search, input, resize
(docs/api.md)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from app.api.deps import PrincipalDep, ServicesDep
from app.api.disconnect import caller_gone
from app.api.errors import error_responses
from app.api.operation_ids import operation_id
from app.api.strict_route import StrictJsonRoute
from app.schemas import (
    EXECUTION_EXAMPLE,
    ExecutionCreate,
    ExecutionInput,
    ExecutionPublic,
    ExecutionResize,
    ExecutionsPublic,
    OutputMatch,
    OutputSearch,
)

router = APIRouter(
    generate_unique_id_function=operation_id,
    prefix="/v1/executions",
    tags=["executions"],
    route_class=StrictJsonRoute,
)

MAX_OUTPUT_READ = 16 * 1024 * 1024
DEFAULT_OUTPUT_READ = 1024 * 1024
_DIGITS = {"type": "string", "pattern": "^[0-9]+$"}
OUTPUT_HEADERS = {
    "X-Total-Bytes": {"description": "Bytes the command has written so far.", "schema": _DIGITS},
    "X-Complete": {
        "description": "`true` once the execution is terminal and the log will not grow.",
        "schema": {"type": "string", "enum": ["true", "false"]},
    },
    "X-Next-Offset": {
        "description": "Where the next read starts: `offset` + the body's length, or, when "
        "`offset` lies in the evicted middle of a capped log, the first kept byte of the tail.",
        "schema": _DIGITS,
    },
    "X-Offset": {
        "description": "The log position of the body's first byte (the requested `offset`).",
        "schema": _DIGITS,
    },
}
_NOT_FOUND = "No such execution, or another agent's (`not_found`)."
ACCEPTED_EXAMPLES = {
    "job": {
        "summary": "Running as a background job",
        "value": {
            **EXECUTION_EXAMPLE,
            "state": "running",
            "mode": "job",
            "command": "make test",
            "exit_code": None,
            "output": "",
            "total_bytes": 0,
            "total_lines": 0,
            "output_bytes": 0,
            "output_lines": 0,
            "wall_time_ms": None,
            "text": "Backgrounded as job ex_8q3Zb1xvT0m2hC4rNw7Y; result will be delivered "
            "automatically.",
            "finished_at": None,
        },
    },
    "awaiting_approval": {
        "summary": "Held for a human decision",
        "value": {
            **EXECUTION_EXAMPLE,
            "state": "awaiting_approval",
            "command": "git push --force",
            "exit_code": None,
            "output": "",
            "total_bytes": 0,
            "total_lines": 0,
            "output_bytes": 0,
            "output_lines": 0,
            "wall_time_ms": None,
            "text": "(no output)",
            "approval": {
                "id": "ap_Qm4s9LkZr2v0XcT8pWb1",
                "state": "pending",
                "reason": "matched prompt rule: git push *",
                "expires_at": "2026-01-05T10:10:00Z",
            },
            "started_at": None,
            "finished_at": None,
        },
    },
}
_NOT_DRIVABLE = "Only the owner or an admin drives an execution (`forbidden`)."


@router.post(
    "",
    response_model=ExecutionPublic,
    responses={
        200: {"description": "The command finished: its result."},
        202: {
            "model": ExecutionPublic,
            "description": "Still running as a background job (`async`, or auto-backgrounded "
            "after `SHELLGATE_AUTO_BACKGROUND_MS`, or answered early because the server is "
            "stopping), or `awaiting_approval` with `approval` set.",
            "content": {"application/json": {"examples": ACCEPTED_EXAMPLES}},
        },
        **error_responses(
            400,
            401,
            403,
            404,
            410,
            422,
            429,
            507,
            described={
                410: "With several replicas: the `session`'s replica stopped heartbeating, so "
                "the session is gone (`session_lost`, `details.node` names the replica).",
                403: "Not an agent or admin token (`forbidden`); a deny rule matched, or the env "
                "rules deny a name of `env` or of the session's env (`policy_denied`); an "
                "approver denied it or it expired (`approval_rejected`).",
                429: "The background job cap is reached (`job_limit_reached`), or the caller "
                "already has `SHELLGATE_MAX_PENDING_APPROVALS` approvals pending "
                "(`pending_approval_limit`); header `Retry-After`.",
                404: "The `session`, or an `artifact://` id in the command, does not exist.",
                422: 'Malformed body (`{"detail"}`), or a value refused (`invalid_request`: '
                "empty command, bad env name, missing cwd, …; `intercepted`: the interceptor "
                "routes it to a dedicated tool).",
            },
        ),
    },
    summary="Run a command",
)
async def create_execution(
    body: ExecutionCreate, principal: PrincipalDep, services: ServicesDep, request: Request
) -> JSONResponse:
    """Runs `bash -c <command>` under the policy. A foreground call answers 200 with the result
    once it ends; a call still running after the auto-background threshold, or sent with
    `async: true`, answers 202 and continues as a job (follow it with `GET …?wait=N`, the
    `/output` log or the WebSocket stream). A `prompt` verdict creates the execution in
    `awaiting_approval`; the call holds up to `approval_wait` seconds for a decision, then
    answers 202 with the pending `approval`."""
    # Its body read, the request's receive channel only has the client's disconnect to give.
    gone = caller_gone(request.receive)
    outcome = await services.executions.submit(principal, body, caller_gone=gone)
    return JSONResponse(outcome.execution.model_dump(mode="json"), status_code=outcome.status_code)


@router.get(
    "",
    response_model=ExecutionsPublic,
    responses=error_responses(401, 422),
    summary="List executions",
)
async def list_executions(
    principal: PrincipalDep,
    services: ServicesDep,
    state: Annotated[
        list[str] | None, Query(description="Filter by state; repeat or comma-separate.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
) -> ExecutionsPublic:
    """Newest first, `limit` a page; pass `next_cursor` back as `cursor` for the next page.
    Agents see their own executions; approvers and admins see all."""
    states = [part for value in state or [] for part in value.split(",") if part] or None
    data, next_cursor = await services.executions.list_page(
        principal, states=states, limit=limit, cursor=cursor
    )
    return ExecutionsPublic(data=data, next_cursor=next_cursor)


@router.get(
    "/{execution_id}",
    response_model=ExecutionPublic,
    responses=error_responses(401, 404, 422, described={404: _NOT_FOUND}),
    summary="Read one execution",
)
async def get_execution(
    execution_id: str,
    principal: PrincipalDep,
    services: ServicesDep,
    wait: Annotated[
        float, Query(ge=0, le=600, description="Long-poll up to N seconds for a terminal state.")
    ] = 0,
) -> ExecutionPublic:
    """The record; a running one carries its output so far. With `wait=N` the call returns as
    soon as the execution is terminal, or after N seconds with the current state."""
    return await services.executions.get(principal, execution_id, wait=wait)


@router.post(
    "/{execution_id}/cancel",
    response_model=ExecutionPublic,
    responses=error_responses(
        401,
        403,
        404,
        409,
        described={
            403: "Only the owner or an admin cancels (`forbidden`).",
            404: _NOT_FOUND,
            409: "The execution is already terminal (`conflict`).",
        },
    ),
    summary="Cancel an execution",
)
async def cancel_execution(
    execution_id: str, principal: PrincipalDep, services: ServicesDep
) -> ExecutionPublic:
    """Kills the process group (SIGTERM, then SIGKILL after the grace period) and answers with
    the `cancelled` record; an execution awaiting approval is withdrawn without running."""
    return await services.executions.cancel(principal, execution_id)


@router.get(
    "/{execution_id}/output",
    response_class=Response,
    responses={
        200: {
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            },
            "description": "Up to `limit` raw bytes of the merged log from `offset`.",
            "headers": OUTPUT_HEADERS,
        },
        **error_responses(401, 404, 410, 422, described={404: _NOT_FOUND}),
    },
    summary="Read the raw output log",
)
async def read_output(
    execution_id: str,
    principal: PrincipalDep,
    services: ServicesDep,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_OUTPUT_READ)] = DEFAULT_OUTPUT_READ,
) -> Response:
    """The byte-exact merged stdout/stderr (or PTY) log, from `offset`. Loop on
    `X-Next-Offset` until `X-Complete: true` and an empty body. A log over the artifact cap
    keeps its head and a rolling tail: a read inside the evicted middle is empty and
    `X-Next-Offset` points at the first kept byte after it; offsets never shift."""
    page = await services.executions.read_output(principal, execution_id, offset, limit)
    return Response(
        content=page.data,
        media_type="application/octet-stream",
        headers={
            "X-Total-Bytes": str(page.total_bytes),
            "X-Complete": "true" if page.complete else "false",
            "X-Next-Offset": str(page.next_offset),
            # Where the body's first byte sits in the log: always the requested offset.
            "X-Offset": str(offset),
        },
    )


@router.get(
    "/{execution_id}/search",
    response_model=OutputSearch,
    responses=error_responses(401, 404, 410, 422, described={404: _NOT_FOUND}),
    summary="Search the whole output log",
)
async def search_output(
    execution_id: str,
    principal: PrincipalDep,
    services: ServicesDep,
    q: Annotated[str, Query(min_length=1, max_length=1000, description="The text to find.")],
    limit: Annotated[int, Query(ge=1, le=1000, description="At most this many lines.")] = 100,
    ignore_case: Annotated[
        bool, Query(description="Fold ASCII letters (`Error` finds `ERROR`).")
    ] = False,
) -> OutputSearch:
    """The lines of the execution's whole log (on disk, beyond any client's scrollback) that
    hold `q`, in log order, each with its byte offset (a `/output` or stream `offset` to jump
    to), its line number and the line as text. A running execution is searched as far as it
    has written."""
    found, total, complete = await services.executions.search_output(
        principal, execution_id, q, limit, ignore_case
    )
    return OutputSearch(
        query=q,
        matches=[OutputMatch(offset=m.offset, line=m.line, text=m.text) for m in found.matches],
        truncated=found.truncated,
        skipped=list(found.skipped) if found.skipped is not None else None,
        total_bytes=total,
        complete=complete,
    )


_DRIVE_ERRORS = error_responses(
    400,
    401,
    403,
    404,
    409,
    422,
    described={
        403: _NOT_DRIVABLE,
        404: _NOT_FOUND,
        409: "The execution has no PTY, or no longer runs (`conflict`).",
    },
)


@router.post(
    "/{execution_id}/input",
    status_code=204,
    responses=_DRIVE_ERRORS,
    summary="Type into a PTY run",
)
async def send_input(
    execution_id: str, body: ExecutionInput, principal: PrincipalDep, services: ServicesDep
) -> Response:
    """Writes `data` (UTF-8) to the terminal of a `pty: true` run. Keystrokes are not checked
    by the policy again; each batch is logged with who sent it."""
    await services.executions.send_input(principal, execution_id, body.data.encode())
    return Response(status_code=204)


@router.post(
    "/{execution_id}/resize",
    status_code=204,
    responses=_DRIVE_ERRORS,
    summary="Resize a PTY run",
)
async def resize(
    execution_id: str, body: ExecutionResize, principal: PrincipalDep, services: ServicesDep
) -> Response:
    """Sets the terminal size of a `pty: true` run (clamped to 5..200 rows, 20..400 cols)."""
    await services.executions.resize(principal, execution_id, body.rows, body.cols)
    return Response(status_code=204)
