"""`/v1/approvals`: list, read and decide approvals (SPEC §5.2)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.api.deps import PrincipalDep, ServicesDep
from app.models import Approval, ApprovalState
from app.schemas import ApprovalDecision, ApprovalPublic, ApprovalsPublic, ErrorResponse

router = APIRouter(prefix="/v1/approvals", tags=["approvals"])
ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorResponse} for code in (401, 403, 404, 409, 422)
}


def to_public(approval: Approval) -> ApprovalPublic:
    return ApprovalPublic.model_validate(approval.model_dump())


@router.get("", response_model=ApprovalsPublic, responses=ERRORS, summary="List approvals")
async def list_approvals(
    principal: PrincipalDep,
    services: ServicesDep,
    state: ApprovalState | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> ApprovalsPublic:
    approvals = await services.approvals.list(
        principal, state=state.value if state else None, limit=limit
    )
    return ApprovalsPublic(data=[to_public(approval) for approval in approvals])


@router.get("/{approval_id}", response_model=ApprovalPublic, responses=ERRORS)
async def get_approval(
    approval_id: str, principal: PrincipalDep, services: ServicesDep
) -> ApprovalPublic:
    return to_public(await services.approvals.get(approval_id, principal))


@router.post("/{approval_id}/approve", response_model=ApprovalPublic, responses=ERRORS)
async def approve(
    approval_id: str,
    principal: PrincipalDep,
    services: ServicesDep,
    body: ApprovalDecision | None = None,
) -> ApprovalPublic:
    approval = await services.approvals.decide(
        approval_id=approval_id,
        approve=True,
        principal=principal,
        reason=body.reason if body else None,
    )
    return to_public(approval)


@router.post("/{approval_id}/deny", response_model=ApprovalPublic, responses=ERRORS)
async def deny(
    approval_id: str,
    principal: PrincipalDep,
    services: ServicesDep,
    body: ApprovalDecision | None = None,
) -> ApprovalPublic:
    approval = await services.approvals.decide(
        approval_id=approval_id,
        approve=False,
        principal=principal,
        reason=body.reason if body else None,
    )
    return to_public(approval)
