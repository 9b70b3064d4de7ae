"""The profile a command gets (docs/policy.md#sandbox), pure: the server's default, the policy's
`sandbox`, a rule's widening; what a request asks beyond it; the policy's validation."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from app.policy.engine import PolicyDocument
from app.sandbox.effective import (
    SandboxAsk,
    beyond,
    effective_profile,
    expand_path,
    granted,
    network_beyond,
    network_union,
)
from app.sandbox.policy_rules import SandboxPolicy, SandboxWidening
from app.sandbox.profile import SandboxProfile

WORKSPACE = "/srv/work"
DEFAULT = SandboxProfile(
    network="off", write=(WORKSPACE, "/tmp"), hidden=(f"{WORKSPACE}/data", "/home/u/.ssh")
)


def profile(policy: dict[str, Any], widening: dict[str, Any] | None = None) -> SandboxProfile:
    return effective_profile(
        DEFAULT,
        SandboxPolicy.model_validate(policy),
        None if widening is None else SandboxWidening.model_validate(widening),
        workspace=WORKSPACE,
    )


# --- composition ------------------------------------------------------------------------------


def test_an_empty_policy_gives_the_servers_default() -> None:
    assert profile({}) == DEFAULT


def test_the_policy_adds_write_and_hidden_paths_and_sets_the_network() -> None:
    got = profile({"network": ["pypi.org:443"], "write": ["/srv/cache"], "hidden": ["~/.aws"]})
    assert got.network == ("pypi.org:443",)
    assert got.write == (WORKSPACE, "/tmp", "/srv/cache")
    assert got.hidden[:2] == DEFAULT.hidden and got.hidden[2].endswith("/.aws")
    assert not got.escalated


def test_workspace_is_expanded_in_every_path() -> None:
    got = profile({"write": ["$WORKSPACE/out"]})
    assert got.write[-1] == f"{WORKSPACE}/out"
    assert expand_path("$WORKSPACE", workspace=WORKSPACE) == WORKSPACE
    assert expand_path("~/.cache", workspace=WORKSPACE, home="/home/u") == "/home/u/.cache"
    assert expand_path("/abs", workspace=WORKSPACE) == "/abs"


def test_the_policy_can_narrow_the_network_the_default_gives() -> None:
    on = SandboxProfile(network="on", write=(WORKSPACE,), hidden=())
    narrowed = effective_profile(
        on, SandboxPolicy.model_validate({"network": "off"}), None, workspace=WORKSPACE
    )
    assert narrowed.network == "off"


def test_a_rules_widening_adds_network_and_write() -> None:
    got = profile({"network": ["pypi.org"]}, {"network": "on", "write": ["/opt/npm"]})
    assert got.network == "on"
    assert got.write[-1] == "/opt/npm"
    listed = profile({"network": ["pypi.org"]}, {"network": ["registry.npmjs.org"]})
    assert listed.network == ("pypi.org", "registry.npmjs.org")


def test_hidden_wins_a_policy_write_below_a_hidden_path_is_not_writable() -> None:
    got = profile({"write": ["$WORKSPACE/data/sub", "/home/u/.ssh"]}, {"write": ["/home/u/.ssh/x"]})
    assert got.write == DEFAULT.write
    assert set(DEFAULT.hidden) <= set(got.hidden)


def test_nothing_in_the_policy_removes_a_default_hidden_path() -> None:
    got = profile({"hidden": [], "write": ["/"]})
    assert set(DEFAULT.hidden) <= set(got.hidden)


# --- asking beyond ----------------------------------------------------------------------------


def test_a_request_inside_the_profile_asks_nothing() -> None:
    assert not beyond(DEFAULT, [f"{WORKSPACE}/build", "/tmp/x"], "off")
    on = SandboxProfile(network="on", write=("/",), hidden=())
    assert not beyond(on, ["/anything"], ["example.com"])


def test_a_write_outside_and_more_network_are_beyond() -> None:
    ask = beyond(DEFAULT, ["/srv/out", f"{WORKSPACE}/ok"], "on")
    assert ask == SandboxAsk(write=("/srv/out",), network="on")
    assert ask.describe() == "write /srv/out; network on"


def test_a_path_that_only_shares_a_prefix_is_not_covered() -> None:
    assert beyond(DEFAULT, [f"{WORKSPACE}-other/x"], None).write == (f"{WORKSPACE}-other/x",)


def test_network_order_off_then_hosts_then_on() -> None:
    assert network_beyond("off", ["a.com"]) == ("a.com",)
    assert network_beyond(("*.github.com",), ["api.github.com", "pypi.org"]) == ("pypi.org",)
    assert network_beyond(("a.com",), "on") == "on"
    assert network_beyond("on", ["x"]) is None
    assert network_beyond(("a.com",), "off") is None
    assert network_union("off", ("a.com",)) == ("a.com",)
    assert network_union(("a.com",), "on") == "on"
    assert network_union("on", "off") == "on"


def test_granted_is_the_profile_widened_by_exactly_the_ask_and_marked_escalated() -> None:
    ask = beyond(DEFAULT, ["/srv/out"], ["pypi.org"])
    got = granted(DEFAULT, ask)
    assert got.write == (*DEFAULT.write, "/srv/out")
    assert got.network == ("pypi.org",)
    assert got.hidden == DEFAULT.hidden
    assert got.escalated


# --- the policy's validation ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sandbox", "message"),
    [
        ({"write": ["relative/dir"]}, "must be absolute, or start with $WORKSPACE or ~"),
        ({"write": ["$WORKSPACE/../etc"]}, "must not contain `..`"),
        ({"write": ["/a\0b"]}, "NUL"),
        ({"network": "sometimes"}, 'network must be "on", "off" or a list'),
        ({"network": []}, 'an empty host list reaches nothing; write "off"'),
        ({"network": ["exa mple.com"]}, "is not a host[:port] glob"),
        ({"network": ["example.com:70000"]}, "the port must be within 1..65535"),
        ({"escalation": "allow"}, "escalation"),
        ({"hidden": ["/"]}, "it would hide everything"),
        ({"readable": ["/x"]}, "Extra inputs are not permitted"),
    ],
)
def test_an_invalid_sandbox_is_refused_with_a_message(
    sandbox: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError) as raised:
        PolicyDocument.model_validate({"sandbox": sandbox})
    assert message in str(raised.value)


def test_a_rule_widening_cannot_narrow_or_ride_on_a_deny() -> None:
    with pytest.raises(ValidationError, match='network must be "on" or a list'):
        PolicyDocument.model_validate(
            {"rules": [{"match": "x", "approval": "allow", "sandbox": {"network": "off"}}]}
        )
    with pytest.raises(ValidationError, match="a deny rule cannot carry a sandbox"):
        PolicyDocument.model_validate(
            {"rules": [{"match": "x", "approval": "deny", "sandbox": {"network": "on"}}]}
        )
    with pytest.raises(ValidationError, match="Extra inputs"):
        PolicyDocument.model_validate(
            {"rules": [{"match": "x", "approval": "allow", "sandbox": {"hidden": ["/x"]}}]}
        )


def test_a_valid_sandbox_reads_back_normalised_and_rules_without_one_unchanged() -> None:
    document = PolicyDocument.model_validate(
        {
            "sandbox": {
                "network": ["*.GitHub.com:443", " pypi.org "],
                "write": ["$WORKSPACE/./out//x", "~/.cache", "/srv/"],
                "escalation": " Deny ",
            },
            "rules": [
                {"match": "npm install *", "approval": "allow", "sandbox": {"network": "on"}},
                {"match": "git *", "approval": "allow"},
            ],
        }
    )
    dumped = document.model_dump(mode="json")
    assert dumped["sandbox"] == {
        "network": ["*.github.com:443", "pypi.org"],
        "write": ["$WORKSPACE/out/x", "~/.cache", "/srv"],
        "hidden": [],
        "escalation": "deny",
    }
    assert dumped["rules"][0]["sandbox"] == {"network": "on", "write": []}
    assert dumped["rules"][1] == {"match": "git *", "approval": "allow"}
    assert PolicyDocument().model_dump(mode="json")["sandbox"] == {
        "network": None,
        "write": [],
        "hidden": [],
        "escalation": "prompt",
    }


@pytest.mark.parametrize(
    "sandbox",
    [{"write": [{"a": 1}]}, {"write": [["x"]]}, {"network": [{"a": 1}]}, {"write": "/x"}],
)
def test_a_sandbox_of_the_wrong_shape_is_a_validation_error_not_a_crash(
    sandbox: dict[str, Any],
) -> None:
    with pytest.raises(ValidationError):
        PolicyDocument.model_validate({"sandbox": sandbox})
