"""`/v1/executions`: run, list, read, wait, cancel, output, input, resize (SPEC §2-§4)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response
from fastapi.responses import JSONResponse

from app.api.deps import PrincipalDep, ServicesDep
from app.api.errors import error_responses
from app.schemas import (
    ExecutionCreate,
    ExecutionInput,
    ExecutionPublic,
    ExecutionResize,
    ExecutionsPublic,
)

router = APIRouter(prefix="/v1/executions", tags=["executions"])

ERRORS = error_responses(401, 403, 404, 409, 422, 429)
MAX_OUTPUT_READ = 16 * 1024 * 1024


@router.post(
    "",
    response_model=ExecutionPublic,
    responses={
        **ERRORS,
        202: {"model": ExecutionPublic, "description": "Job started or awaiting approval"},
    },
    summary="Run a command",
)
async def create_execution(
    body: ExecutionCreate, principal: PrincipalDep, services: ServicesDep
) -> JSONResponse:
    outcome = await services.executions.submit(principal, body)
    return JSONResponse(outcome.execution.model_dump(mode="json"), status_code=outcome.status_code)


@router.get("", response_model=ExecutionsPublic, responses=ERRORS, summary="List executions")
async def list_executions(
    principal: PrincipalDep,
    services: ServicesDep,
    state: Annotated[
        list[str] | None, Query(description="Filter by state; repeat or comma-separate.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
) -> ExecutionsPublic:
    states = [part for value in state or [] for part in value.split(",") if part] or None
    data, next_cursor = await services.executions.list_page(
        principal, states=states, limit=limit, cursor=cursor
    )
    return ExecutionsPublic(data=data, next_cursor=next_cursor)


@router.get("/{execution_id}", response_model=ExecutionPublic, responses=ERRORS, summary="Read one")
async def get_execution(
    execution_id: str,
    principal: PrincipalDep,
    services: ServicesDep,
    wait: Annotated[
        float, Query(ge=0, le=600, description="Long-poll up to N seconds for a terminal state.")
    ] = 0,
) -> ExecutionPublic:
    return await services.executions.get(principal, execution_id, wait=wait)


@router.post(
    "/{execution_id}/cancel", response_model=ExecutionPublic, responses=ERRORS, summary="Cancel"
)
async def cancel_execution(
    execution_id: str, principal: PrincipalDep, services: ServicesDep
) -> ExecutionPublic:
    return await services.executions.cancel(principal, execution_id)


@router.get(
    "/{execution_id}/output",
    response_class=Response,
    responses={
        **ERRORS,
        200: {
            "content": {"application/octet-stream": {}},
            "description": "Raw bytes of the merged log from `offset`; headers X-Total-Bytes, "
            "X-Complete, X-Next-Offset (where the next read starts).",
        },
    },
    summary="Read the raw output log",
)
async def read_output(
    execution_id: str,
    principal: PrincipalDep,
    services: ServicesDep,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_OUTPUT_READ)] = 1024 * 1024,
) -> Response:
    page = await services.executions.read_output(principal, execution_id, offset, limit)
    return Response(
        content=page.data,
        media_type="application/octet-stream",
        headers={
            "X-Total-Bytes": str(page.total_bytes),
            "X-Complete": "true" if page.complete else "false",
            "X-Next-Offset": str(page.next_offset),
        },
    )


@router.post(
    "/{execution_id}/input", status_code=204, responses=ERRORS, summary="Type into a PTY run"
)
async def send_input(
    execution_id: str, body: ExecutionInput, principal: PrincipalDep, services: ServicesDep
) -> Response:
    await services.executions.send_input(principal, execution_id, body.data.encode())
    return Response(status_code=204)


@router.post(
    "/{execution_id}/resize", status_code=204, responses=ERRORS, summary="Resize a PTY run"
)
async def resize(
    execution_id: str, body: ExecutionResize, principal: PrincipalDep, services: ServicesDep
) -> Response:
    await services.executions.resize(principal, execution_id, body.rows, body.cols)
    return Response(status_code=204)
