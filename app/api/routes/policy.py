"""`/v1/policy`: read, replace (admin) and dry-run the policy (SPEC §5.4)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from app.api.deps import AdminDep, PrincipalDep, ServicesDep
from app.api.errors import error_responses
from app.api.strict_route import StrictJsonRoute
from app.errors import InvalidRequestError
from app.models import PolicyVersion
from app.policy import PolicyDocument, PolicyRule, RuleAction
from app.schemas import StrictModel
from app.shell_syntax import extract_leading_cd
from app.timestamps import aware_utc

router = APIRouter(prefix="/v1/policy", tags=["policy"], route_class=StrictJsonRoute)


class PolicyEvaluate(StrictModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"command": "cd /srv && rm -rf build", "tools": []}]},
    )

    command: str = Field(
        max_length=1024 * 1024, description="The command as an agent would send it."
    )
    tools: list[str] | None = Field(
        default=None, max_length=64, description="The caller's dedicated tools (interceptor)."
    )
    cwd: str | None = Field(
        default=None,
        description="As in POST /v1/executions: when absent, a leading `cd <dir> &&` is "
        "rewritten and the interceptor also sees the rest of the command.",
    )


class InterceptionPublic(BaseModel):
    tool: str
    message: str


class CdRewrite(BaseModel):
    cwd: str
    command: str


class PolicyEvaluation(BaseModel):
    verdict: RuleAction = Field(description="allow | prompt | deny")
    reason: str
    matched_rule: PolicyRule | None
    segments: list[str]
    critical_hits: list[str] = Field(description="Names of the critical patterns found.")
    parse_error: str | None
    cd_rewrite: CdRewrite | None = Field(
        description="The leading-`cd` rewrite submit would apply (null: none)."
    )
    interception: InterceptionPublic | None = Field(
        description="What the interceptor would block; null when nothing would, or when the "
        "verdict is deny (deny never reaches the interceptor; prompt reaches it on approval)."
    )


class PolicyVersionPublic(BaseModel):
    id: int
    author: str
    created_at: datetime
    document: PolicyDocument


class PolicyVersionsPublic(BaseModel):
    data: list[PolicyVersionPublic] = Field(description="Newest first; the first is in force.")


def _version_public(version: PolicyVersion) -> PolicyVersionPublic:
    return PolicyVersionPublic(
        id=version.id or 0,
        author=version.author,
        created_at=aware_utc(version.created_at),
        document=PolicyDocument.model_validate_json(version.document),
    )


@router.get(
    "", response_model=PolicyDocument, responses=error_responses(401), summary="The policy in force"
)
async def get_policy(_: PrincipalDep, services: ServicesDep) -> PolicyDocument:
    """Ordered rules (the first that applies wins), the default and critical outcomes, and the
    interceptor."""
    return services.policy.document


@router.put(
    "",
    response_model=PolicyDocument,
    responses=error_responses(400, 401, 403, 422, described={403: "Not an admin (`forbidden`)."}),
    summary="Replace the policy (admin)",
    description="Validated as a whole (rule approvals, interceptor regexes and flags, unknown "
    "fields): an invalid document is refused with 422 and the policy in force is unchanged. "
    "Every accepted document is kept as a version with its author and time.",
)
async def put_policy(
    body: PolicyDocument, principal: AdminDep, services: ServicesDep
) -> PolicyDocument:
    await services.policy.replace(body, author=principal.name)
    return services.policy.document


@router.get(
    "/versions",
    response_model=PolicyVersionsPublic,
    responses=error_responses(401, 422),
    summary="Every policy version, with author and time",
)
async def policy_versions(
    _: PrincipalDep,
    services: ServicesDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> PolicyVersionsPublic:
    """Newest first: the first is in force. Each carries the whole document."""
    versions = await services.policy.versions(limit)
    return PolicyVersionsPublic(data=[_version_public(version) for version in versions])


@router.post(
    "/evaluate",
    response_model=PolicyEvaluation,
    responses=error_responses(400, 401, 422),
    summary="Dry run: what the policy and the interceptor would do; runs nothing",
)
async def evaluate(
    body: PolicyEvaluate, _: PrincipalDep, services: ServicesDep
) -> PolicyEvaluation:
    """The verdict `POST /v1/executions` would get for this command, with the matched rule,
    the segments it judged, critical patterns, the leading-`cd` rewrite and what the
    interceptor would block. Nothing runs and nothing is recorded."""
    if len(body.command.encode("utf-8", "surrogatepass")) > services.settings.max_command_bytes:
        raise InvalidRequestError(
            f"command is longer than {services.settings.max_command_bytes} bytes"
        )
    verdict = await services.policy.evaluate(body.command)
    leading = None if body.cwd else extract_leading_cd(body.command)
    interception = None
    if verdict.approval is not RuleAction.deny:
        hit = await services.policy.intercept(
            body.command, body.tools, rewritten=leading.rest if leading else None
        )
        if hit is not None:
            interception = InterceptionPublic(tool=hit.tool, message=hit.message)
    return PolicyEvaluation(
        verdict=verdict.approval,
        reason=verdict.reason,
        matched_rule=verdict.matched_rule,
        segments=verdict.segments,
        critical_hits=verdict.critical_hits,
        parse_error=verdict.parse_error,
        cd_rewrite=CdRewrite(cwd=leading.target, command=leading.rest) if leading else None,
        interception=interception,
    )
