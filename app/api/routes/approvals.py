"""`/v1/approvals`: list, read and decide approvals, and their live stream
(docs/policy.md#approvals)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Query, WebSocket, WebSocketDisconnect

from app.api.deps import PrincipalDep, ServicesDep, WebSocketServicesDep, websocket_principal
from app.api.errors import error_responses
from app.api.operation_ids import operation_id
from app.api.routes.stream import close_code_for
from app.api.strict_route import StrictJsonRoute
from app.approvals.service import approval_public
from app.core.auth import Principal
from app.core.errors import AppError, InvalidRequestError, UnauthenticatedError
from app.schemas import ApprovalDecision, ApprovalPublic, ApprovalsPublic
from app.store.models import ApprovalState

router = APIRouter(
    generate_unique_id_function=operation_id,
    prefix="/v1/approvals",
    tags=["approvals"],
    route_class=StrictJsonRoute,
)
_NOT_FOUND = "No such approval, or one of another agent's executions (`not_found`)."
DECIDE_ERRORS = error_responses(
    400,
    401,
    403,
    404,
    409,
    422,
    described={
        403: "Only approvers and admins decide; never agents, not even on their own "
        "executions (`forbidden`).",
        404: _NOT_FOUND,
        409: "The approval was already decided, expired or withdrawn (`conflict`).",
    },
)
SNAPSHOT_LIMIT = 500
CLOSE_UNAUTHENTICATED = 4401
# "Try again later": the listener fell behind and was dropped; reconnect for a fresh snapshot.
CLOSE_OVERFLOW = 1013


@router.get(
    "",
    response_model=ApprovalsPublic,
    responses=error_responses(401, 422),
    summary="List approvals",
)
async def list_approvals(
    principal: PrincipalDep,
    services: ServicesDep,
    state: ApprovalState | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> ApprovalsPublic:
    """Newest first, optionally of one `state`. Approvers and admins see all; an agent sees
    the approvals of its own executions. Follow new ones live on `WS /v1/approvals/stream`
    (see the API description)."""
    approvals = await services.approvals.list(
        principal, state=state.value if state else None, limit=limit
    )
    return ApprovalsPublic(data=[approval_public(approval) for approval in approvals])


@router.get(
    "/{approval_id}",
    response_model=ApprovalPublic,
    responses=error_responses(401, 404, described={404: _NOT_FOUND}),
    summary="Read one approval",
)
async def get_approval(
    approval_id: str, principal: PrincipalDep, services: ServicesDep
) -> ApprovalPublic:
    """The approval with its command, cwd, reason, requester, decision and expiry."""
    return approval_public(await services.approvals.get(approval_id, principal))


@router.post(
    "/{approval_id}/approve",
    response_model=ApprovalPublic,
    responses=DECIDE_ERRORS,
    summary="Approve: the command runs",
)
async def approve(
    approval_id: str,
    principal: PrincipalDep,
    services: ServicesDep,
    body: ApprovalDecision | None = None,
) -> ApprovalPublic:
    """Approves a pending approval; its execution starts at once (as a job when its caller
    stopped waiting). The optional `reason` is stored with the decision. With `remember`, calls
    matching its `pattern` (default: the approval's `suggested_pattern`) run without a prompt
    for `for_seconds`: the requesting owner's (`scope: owner`) or everyone's (`scope: all`,
    admins only), as a remembered rule in a new policy version (docs/policy.md)."""
    if body is not None and body.remember is not None:
        approval = await services.remembering.approve(
            approval_id=approval_id,
            principal=principal,
            reason=body.reason,
            remember=body.remember,
        )
        return approval_public(approval)
    approval = await services.approvals.decide(
        approval_id=approval_id,
        approve=True,
        principal=principal,
        reason=body.reason if body else None,
    )
    return approval_public(approval)


@router.post(
    "/{approval_id}/deny",
    response_model=ApprovalPublic,
    responses=DECIDE_ERRORS,
    summary="Deny: the execution is rejected",
)
async def deny(
    approval_id: str,
    principal: PrincipalDep,
    services: ServicesDep,
    body: ApprovalDecision | None = None,
) -> ApprovalPublic:
    """Denies a pending approval; its execution ends `rejected` and a waiting caller gets 403
    `approval_rejected` with the reason."""
    if body is not None and body.remember is not None:
        raise InvalidRequestError("remember applies to approve only; a denial is never remembered")
    approval = await services.approvals.decide(
        approval_id=approval_id,
        approve=False,
        principal=principal,
        reason=body.reason if body else None,
    )
    return approval_public(approval)


@router.websocket("/stream")
async def approvals_stream(websocket: WebSocket, services: WebSocketServicesDep) -> None:
    """Server → client JSON frames: one `{"type":"snapshot","approvals":[…pending…]}`, then
    `approval.requested` / `approval.decided` events `{"type", "approval"}`, `{"type":"ping"}`
    when idle, and `{"type":"overflow"}` followed by close 1013 when this listener fell behind.
    Agents see only the approvals of their own executions. Client frames are ignored."""
    await websocket.accept()
    try:
        principal = await websocket_principal(websocket, services)
    except UnauthenticatedError as error:
        await websocket.close(code=CLOSE_UNAUTHENTICATED, reason=error.message)
        return
    except AppError as error:  # a ticket, and no database to redeem it in: 1013
        await websocket.close(code=close_code_for(error), reason=error.message)
        return
    # Subscribe before reading the snapshot so that nothing decided in between is missed.
    queue = services.approvals.subscribe()
    try:
        try:
            pending = await services.approvals.list(
                principal, state="pending", limit=SNAPSHOT_LIMIT
            )
        except AppError as error:  # the database does not answer: 1013, try again later
            await websocket.close(code=close_code_for(error), reason=error.message)
            return
        snapshot = [approval_public(approval).model_dump(mode="json") for approval in pending]
        with contextlib.suppress(WebSocketDisconnect, OSError):
            await websocket.send_json({"type": "snapshot", "approvals": snapshot})
            async with anyio.create_task_group() as group:
                group.start_soon(_until_client_leaves, websocket, group.cancel_scope)
                await _relay(
                    websocket,
                    queue,
                    principal,
                    already_sent={item["id"] for item in snapshot},
                    ping_seconds=services.settings.ws_ping_seconds,
                )
                group.cancel_scope.cancel()
    finally:
        services.approvals.unsubscribe(queue)


async def _until_client_leaves(websocket: WebSocket, scope: anyio.CancelScope) -> None:
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            scope.cancel()
            return


async def _relay(
    websocket: WebSocket,
    queue: asyncio.Queue[dict[str, Any]],
    principal: Principal,
    *,
    already_sent: set[str],
    ping_seconds: float,
) -> None:
    while True:
        try:
            event = await asyncio.wait_for(queue.get(), ping_seconds)
        except TimeoutError:
            # An application-level ping keeps idle proxies from closing the socket and lets a
            # browser notice a dead connection.
            await websocket.send_json({"type": "ping"})
            continue
        if event["type"] == "overflow":
            await websocket.send_json(event)
            await websocket.close(code=CLOSE_OVERFLOW, reason="too far behind; reconnect")
            return
        approval = event["approval"]
        if not principal.may_read(approval["requested_by"]):
            continue
        if event["type"] == "approval.requested" and approval["id"] in already_sent:
            continue  # requested while the snapshot was read: the snapshot has it already
        await websocket.send_json(event)
