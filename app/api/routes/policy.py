"""`/v1/policy`: read, replace (admin) and dry-run the policy (SPEC §5.4)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query
from pydantic import BaseModel, Field

from app.api.deps import AdminDep, PrincipalDep, ServicesDep
from app.interceptor import check as check_interception
from app.interceptor import effective_rules
from app.policy import PolicyDocument
from app.policy_service import parse_policy_body
from app.schemas import ErrorResponse, StrictModel

router = APIRouter(prefix="/v1/policy", tags=["policy"])
ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorResponse} for code in (401, 403, 422)
}


class PolicyEvaluate(StrictModel):
    command: str = Field(max_length=1024 * 1024)
    tools: list[str] | None = None


class Interception(BaseModel):
    tool: str
    message: str


class PolicyEvaluation(BaseModel):
    approval: str
    reason: str
    matched_rule: dict[str, Any] | None
    segments: list[str]
    critical_hits: list[str]
    parse_error: str | None
    interception: Interception | None


class PolicyVersionPublic(BaseModel):
    id: int
    author: str
    created_at: Any
    document: PolicyDocument


@router.get("", response_model=PolicyDocument, responses=ERRORS, summary="The policy in force")
async def get_policy(_: PrincipalDep, services: ServicesDep) -> PolicyDocument:
    return services.policy.document


@router.put("", response_model=PolicyDocument, responses=ERRORS, summary="Replace the policy")
async def put_policy(
    principal: AdminDep,
    services: ServicesDep,
    body: Annotated[dict[str, Any], Body()],
) -> PolicyDocument:
    document = parse_policy_body(body)
    await services.policy.replace(document, author=principal.name)
    return document


@router.get(
    "/versions", response_model=list[PolicyVersionPublic], responses=ERRORS, summary="History"
)
async def policy_versions(
    _: AdminDep,
    services: ServicesDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> list[PolicyVersionPublic]:
    versions = await services.policy.versions(limit)
    return [
        PolicyVersionPublic(
            id=version.id or 0,
            author=version.author,
            created_at=version.created_at,
            document=PolicyDocument.model_validate_json(version.document),
        )
        for version in versions
    ]


@router.post("/evaluate", response_model=PolicyEvaluation, responses=ERRORS, summary="Dry run")
async def evaluate(
    body: PolicyEvaluate, _: PrincipalDep, services: ServicesDep
) -> PolicyEvaluation:
    verdict = services.policy.evaluate(body.command)
    interception = None
    settings = services.policy.document.interceptor
    if settings.enabled and body.tools:
        hit = check_interception(body.command, body.tools, effective_rules(settings), body.command)
        if hit is not None:
            interception = Interception(tool=hit.tool, message=hit.message)
    return PolicyEvaluation(
        approval=verdict.approval.value,
        reason=verdict.reason,
        matched_rule=verdict.matched_rule.model_dump() if verdict.matched_rule else None,
        segments=verdict.segments,
        critical_hits=verdict.critical_hits,
        parse_error=verdict.parse_error,
        interception=interception,
    )
