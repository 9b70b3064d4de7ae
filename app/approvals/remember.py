"""Approve and remember (docs/policy.md#remembered-decisions): an approval that also becomes a
scoped, expiring `allow` in a new policy version, so the same call does not cost a human again.

Checked before anything is decided: who may remember for whom (an approver for the requesting
owner, an admin for everyone; an agent never decides at all), that the pattern covers the
approved command, and the duration's bounds. The rule's id is recorded on the approval in the
same conditional update that decides it, then the policy version is written.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta

from app.approvals.service import ApprovalService, require_decider
from app.core.auth import Principal
from app.core.config import Settings
from app.core.errors import ForbiddenError, InvalidRequestError
from app.core.random_ids import random_token
from app.governance.service import PolicyService
from app.policy.engine import glob_matches
from app.policy.remembered import RememberedRule, check_pattern
from app.policy.shell.syntax import normalize_whitespace, read_command
from app.sandbox.policy_rules import SandboxWidening
from app.schemas import RememberChoice
from app.store.models import Approval, ApprovalState

logger = logging.getLogger("shellgate.approvals")


def new_rule_id() -> str:
    return "rr_" + random_token(12)


class Remembering:
    def __init__(self, settings: Settings, approvals: ApprovalService, policy: PolicyService):
        self._settings = settings
        self._approvals = approvals
        self._policy = policy

    async def approve(
        self,
        *,
        approval_id: str,
        principal: Principal,
        reason: str | None,
        remember: RememberChoice,
    ) -> Approval:
        require_decider(principal)
        approval = await self._approvals.get(approval_id, principal)
        if approval.state != ApprovalState.pending:
            # The decision below would refuse it too; refused here before any rule is made.
            return await self._approvals.decide(
                approval_id=approval_id, approve=True, principal=principal, reason=reason
            )
        rule = self._rule_for(approval, principal, reason, remember)
        decided = await self._approvals.decide(
            approval_id=approval_id,
            approve=True,
            principal=principal,
            reason=reason,
            remembered_rule=rule.id,
        )
        version = await self._policy.remember(rule)
        logger.info(
            "%s remembered %s for %s until %s (rule %s, policy version %s)",
            principal.name,
            rule.match,
            rule.owner or "everyone",
            rule.expires_at.isoformat(),
            rule.id,
            version.id,
        )
        return decided

    def _rule_for(
        self,
        approval: Approval,
        principal: Principal,
        reason: str | None,
        remember: RememberChoice,
    ) -> RememberedRule:
        if remember.scope == "all" and principal.role != "admin":
            raise ForbiddenError("only an admin can remember a decision for everyone")
        if approval.suggested_pattern is None:
            raise InvalidRequestError(
                "this approval cannot be remembered: it is not a command's prompt or "
                "sandbox escalation (a files-API approval, a session's sandbox, or one from "
                "before remembering existed)"
            )
        pattern = normalize_whitespace(remember.pattern or approval.suggested_pattern)
        problem = check_pattern(pattern)
        if problem is not None:
            raise InvalidRequestError(problem, details={"field": "remember.pattern"})
        commands = [approval.command, *read_command(approval.command).segments]
        if not any(glob_matches(pattern, command) for command in commands):
            raise InvalidRequestError(
                f"the pattern {pattern!r} matches neither the approved command nor any "
                "command in it",
                details={"field": "remember.pattern"},
            )
        low, high = self._settings.remember_min_seconds, self._settings.remember_max_seconds
        if not low <= remember.for_seconds <= high:
            raise InvalidRequestError(
                f"remember.for_seconds must be within {low:g}..{high:g} seconds",
                details={"field": "remember.for_seconds"},
            )
        now = datetime.now(UTC)
        return RememberedRule(
            id=new_rule_id(),
            match=pattern,
            owner=approval.requested_by if remember.scope == "owner" else None,
            author=principal.name,
            reason=reason,
            approval_id=approval.id,
            sandbox=_escalation(approval),
            created_at=now,
            expires_at=now + timedelta(seconds=remember.for_seconds),
        )


def _escalation(approval: Approval) -> SandboxWidening | None:
    """What a sandbox approval asked beyond its profile, as the widening its remembered rule
    vouches for; None for a command's prompt."""
    if approval.kind != "sandbox" or not approval.sandbox_request:
        return None
    asked = json.loads(approval.sandbox_request)
    return SandboxWidening(write=asked.get("write") or [], network=asked.get("network"))


__all__ = ["Remembering"]
