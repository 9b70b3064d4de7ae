"""The sandbox profile a request runs with, and whether it asks for more (docs/policy.md#sandbox).

Only the request's own `sandbox` field can ask for more: nothing a command prints, and nothing
read from its output, reaches here. Asking beyond the profile is an approval of kind `sandbox`
(or a 403 under `escalation: deny`); approved, the one execution runs with exactly the profile
widened by what was asked, marked `escalated`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.core.errors import ConflictError, InvalidRequestError, PolicyDeniedError
from app.governance.service import Judgement, PolicyService
from app.policy.engine import RuleAction
from app.sandbox.effective import SandboxAsk, beyond, granted, under_hidden
from app.sandbox.policy_rules import SandboxWidening, WideningNetwork
from app.sandbox.profile import Network, SandboxProfile
from app.schemas import SandboxRequest

ESCALATION_REASON = "Sandbox escalation requested: "


@dataclass(frozen=True)
class SandboxDecision:
    """`profile`: what the draft runs with; `ask`: what the request asks beyond `base`, the
    profile it would have had (empty: nothing more)."""

    profile: SandboxProfile
    base: SandboxProfile
    ask: SandboxAsk
    justification: str | None = None

    def approval_request(self) -> dict[str, Any] | None:
        """The approval's `sandbox_request` (None when nothing is asked beyond the profile)."""
        if not self.ask:
            return None
        network = self.ask.network
        profile = self.base.to_record()
        return {
            "write": list(self.ask.write),
            "network": network if network is None or isinstance(network, str) else list(network),
            "justification": self.justification,
            "profile": {key: profile[key] for key in ("network", "write", "hidden")},
        }

    def reason(self, judgement: Judgement) -> str:
        """The approval's reason: the command's own (when it was a prompt anyway) and the ask."""
        asked = ESCALATION_REASON + self.ask.describe()
        if judgement.approval is RuleAction.prompt:
            return f"{judgement.reason}; {asked}"
        return asked


def _asked(policy: PolicyService, request: SandboxRequest) -> tuple[list[str], Network | None]:
    write = policy.expand_sandbox_paths(request.write)
    network = request.network
    return write, network if network is None or isinstance(network, str) else tuple(network)


def _refuse_hidden(write: list[str], hidden: tuple[str, ...]) -> None:
    secret = under_hidden(write, hidden)
    if secret:
        raise InvalidRequestError(
            f"sandbox.write: {secret[0]} is hidden from commands (hidden wins); it can never be "
            "made writable, so nothing is asked and nothing ran",
            details={"path": secret[0]},
        )


def for_execution(
    policy: PolicyService, judgement: Judgement, request: SandboxRequest | None
) -> SandboxDecision:
    """A run outside a session: the policy's profile widened by the deciding rule's `sandbox`,
    and whatever the request asks beyond it. PolicyDeniedError (403) when it asks beyond and the
    policy says `escalation: deny`; InvalidRequestError (422) when it asks to write a hidden
    path."""
    rule = judgement.command.matched_rule
    widening = rule.sandbox if rule is not None and rule.approval is not RuleAction.deny else None
    base = policy.sandbox_profile(widening)
    if request is None:
        return SandboxDecision(base, base, SandboxAsk())
    write, network = _asked(policy, request)
    _refuse_hidden(write, base.hidden)
    ask = beyond(base, write, network)
    if not ask:
        return SandboxDecision(base, base, ask, request.justification)
    if policy.document.sandbox.escalation == "deny":
        raise PolicyDeniedError(
            "Sandbox escalation refused: the policy's sandbox.escalation is deny, and this "
            f"request asks beyond its profile ({ask.describe()}). Nothing ran.",
            details={"sandbox": {"write": list(ask.write), "network": _wire(ask.network)}},
        )
    return SandboxDecision(granted(base, ask), base, ask, request.justification)


def covered_by_remembered(
    policy: PolicyService, decision: SandboxDecision, remembered: SandboxWidening
) -> SandboxDecision | None:
    """`decision`'s ask, when a remembered escalation (`remembered`, the widening an approver
    remembered for calls like this one) covers all of it: the execution then runs with exactly
    what it asked, marked `escalated`, and no approval (docs/policy.md#remembered-decisions).
    None when the ask goes beyond it: a human decides as usual."""
    vouched = SandboxAsk(
        write=tuple(policy.expand_sandbox_paths(remembered.write)),
        network=_network(remembered.network),
    )
    if beyond(granted(decision.base, vouched), decision.ask.write, decision.ask.network):
        return None
    return SandboxDecision(decision.profile, decision.base, SandboxAsk(), decision.justification)


def for_session_call(
    policy: PolicyService, session_profile: SandboxProfile, request: SandboxRequest | None
) -> None:
    """A call in a session runs with the session's profile, fixed when it was created; asking
    more is a 409 (nothing runs): the session's processes cannot be widened afterwards."""
    if request is None:
        return
    write, network = _asked(policy, request)
    _refuse_hidden(write, session_profile.hidden)
    ask = beyond(session_profile, write, network)
    if ask:
        raise ConflictError(
            f"This call asks more than its session's sandbox profile ({ask.describe()}); a "
            "session's profile is fixed when it is created. Nothing ran: run the command "
            "outside the session with this `sandbox` (an approver decides), or create a "
            "session that has it.",
            details={"sandbox": {"write": list(ask.write), "network": _wire(ask.network)}},
        )


def for_new_session(policy: PolicyService, request: SandboxRequest | None) -> SandboxDecision:
    """The profile a new session keeps for all its calls: the policy's (a rule's widening is
    for single executions), and what the request asks beyond it. PolicyDeniedError (403) when
    it asks beyond and the policy says `escalation: deny`; beyond under `prompt`, the caller
    asks a human (app/sessions/sandbox_approval.py)."""
    base = policy.sandbox_profile()
    if request is None:
        return SandboxDecision(base, base, SandboxAsk())
    write, network = _asked(policy, request)
    _refuse_hidden(write, base.hidden)
    ask = beyond(base, write, network)
    if not ask:
        return SandboxDecision(base, base, ask, request.justification)
    if policy.document.sandbox.escalation == "deny":
        raise PolicyDeniedError(
            "Sandbox escalation refused: the policy's sandbox.escalation is deny, and this "
            f"session asks beyond its profile ({ask.describe()}). Nothing was created.",
            details={"sandbox": {"write": list(ask.write), "network": _wire(ask.network)}},
        )
    return SandboxDecision(granted(base, ask), base, ask, request.justification)


def _network(network: WideningNetwork | None) -> Network | None:
    return network if network is None or isinstance(network, str) else tuple(network)


def _wire(network: Network | None) -> Any:
    return network if network is None or isinstance(network, str) else list(network)
