"""`/v1/policy`: read, replace (admin) and dry-run the policy (docs/policy.md#policy-api)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query

from app.api.deps import AdminDep, PrincipalDep, ServicesDep
from app.api.errors import error_responses
from app.api.operation_ids import operation_id
from app.api.strict_route import StrictJsonRoute
from app.governance.replay import replay, require_reviewer
from app.governance.service import version_public
from app.policy.engine import PolicyDocument
from app.schemas import PolicyEvaluate, PolicyEvaluation, PolicyReplay, PolicyVersionsPublic

router = APIRouter(
    generate_unique_id_function=operation_id,
    prefix="/v1/policy",
    tags=["policy"],
    route_class=StrictJsonRoute,
)


@router.get(
    "", response_model=PolicyDocument, responses=error_responses(401), summary="The policy in force"
)
async def get_policy(_: PrincipalDep, services: ServicesDep) -> PolicyDocument:
    """Ordered rules (the first that applies wins), the default and critical outcomes, and the
    interceptor, and the `remembered` rules not yet expired."""
    return services.policy.in_force()


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
    return services.policy.in_force()


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
    return PolicyVersionsPublic(data=[version_public(version) for version in versions])


@router.post(
    "/evaluate",
    response_model=PolicyEvaluation,
    responses=error_responses(400, 401, 422),
    summary="Dry run: what the policy and the interceptor would do; runs nothing",
)
async def evaluate(
    body: PolicyEvaluate, principal: PrincipalDep, services: ServicesDep
) -> PolicyEvaluation:
    """The verdict `POST /v1/executions` would get for this command and its env: the
    stricter of the command's verdict and the env's, with the matched rule and segment, the
    segments it judged, critical patterns, unreadable reasons, each env name's verdict, the
    leading-`cd` rewrite and what the interceptor would block. Nothing runs and nothing is
    recorded."""
    return await services.policy.dry_run(
        body,
        max_command_bytes=services.settings.max_command_bytes,
        workspace=services.settings.workspace,
        owner=principal.name,
    )


@router.post(
    "/replay",
    response_model=PolicyReplay,
    responses=error_responses(400, 401, 403, 422, 503, described={403: "An agent (`forbidden`)."}),
    summary="Replay a draft policy over past approvals (approver, admin); changes nothing",
)
async def replay_policy(
    body: PolicyDocument,
    principal: PrincipalDep,
    services: ServicesDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    since: Annotated[datetime | None, Query()] = None,
) -> PolicyReplay:
    """The body is a draft with the schema of `PUT /v1/policy`. For each command approval in
    the history (newest first, at most `limit`, created at or after `since`), what the draft
    would decide for that call now (verdict, reason, deciding rule) beside what the human
    decided, and whether they agree. Nothing is stored and the policy in force is unchanged."""
    require_reviewer(principal)
    return await replay(services.policy, services.db, body, limit=limit, since=since)
