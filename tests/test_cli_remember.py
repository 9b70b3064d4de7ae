"""`shellgate approve ID --remember` against a real server (docs/policy.md#remembered-decisions):
the approvals table offers the suggested pattern, approving with --remember answers the rule,
the owner's identical call then runs without a prompt naming it, and what the server refuses
(an agent, an approver remembering for everyone, a bad duration) is a clear exit 2."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.conftest import AGENT, APPROVER, LiveServer, make_settings, serve
from tests.databases import Databases
from tests.test_cli import shellgate


@pytest.fixture(scope="module")
def prompting(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("cli-remember")
    policy = tmp / "policy.json"
    policy.write_text(
        '{"default": "allow", "rules": [{"match": "echo needs-approval*", "approval": "prompt"}]}'
    )
    with serve(make_settings(tmp, module_databases.new(), policy_file=policy)) as live:
        yield live


def held_approval(server: LiveServer, command: str) -> str:
    result = shellgate(server.base_url, AGENT, "run", "--async", command)
    assert result.exit_code == 0, result.output
    execution_id = result.stdout.strip()
    listing = json.loads(shellgate(server.base_url, APPROVER, "approvals", "--json").stdout)
    (approval,) = [item for item in listing["data"] if item["execution_id"] == execution_id]
    return str(approval["id"])


def test_approve_remember_lets_the_owners_identical_call_run_and_names_the_rule(
    prompting: LiveServer,
) -> None:
    url = prompting.base_url
    command = "echo needs-approval-cli remembered"
    approval_id = held_approval(prompting, command)
    table = shellgate(url, APPROVER, "approvals")
    assert "remember echo needs-approval-cli *" in table.stdout

    approved = shellgate(
        url, APPROVER, "approve", approval_id, "--remember", "--for", "8h", "--reason", "echo"
    )
    assert approved.exit_code == 0, approved.output
    first, second = approved.stdout.splitlines()
    assert first.startswith(f"{approval_id} approved (execution ")
    assert second.startswith("remembered rr_")
    assert ": echo needs-approval-cli * for alice until " in second
    rule_id = second.split()[1].rstrip(":")

    again = shellgate(url, AGENT, "run", command)
    assert again.exit_code == 0, again.output
    assert again.stdout.startswith("needs-approval-cli remembered\n")
    with prompting.client(AGENT) as alice:
        latest = alice.get("/v1/executions", params={"limit": 1}).json()["data"][0]
    assert latest["command"] == command
    assert latest["remembered_rule"] == rule_id
    assert latest["reason"].startswith(f"Allowed by remembered rule {rule_id}:")


def test_an_edited_pattern_is_remembered_as_given(prompting: LiveServer) -> None:
    url = prompting.base_url
    approval_id = held_approval(prompting, "echo needs-approval-edited one")
    approved = shellgate(
        url,
        APPROVER,
        "approve",
        approval_id,
        "--remember",
        "--pattern",
        "echo needs-approval-edited o*",
    )
    assert approved.exit_code == 0, approved.output
    assert ": echo needs-approval-edited o* for alice until " in approved.stdout
    again = shellgate(url, AGENT, "run", "echo needs-approval-edited other")
    assert again.exit_code == 0, again.output


def test_refusals_are_a_clear_exit_2_and_leave_the_approval_pending(
    prompting: LiveServer,
) -> None:
    url = prompting.base_url
    approval_id = held_approval(prompting, "echo needs-approval-refused x")

    agent = shellgate(url, AGENT, "approve", approval_id, "--remember")
    assert agent.exit_code == 2
    assert "HTTP 403" in agent.stderr and "forbidden" in agent.stderr

    for_everyone = shellgate(url, APPROVER, "approve", approval_id, "--remember", "--scope", "all")
    assert for_everyone.exit_code == 2
    assert "only an admin can remember a decision for everyone" in for_everyone.stderr
    assert "HTTP 403" in for_everyone.stderr

    too_short = shellgate(url, APPROVER, "approve", approval_id, "--remember", "--for", "1s")
    assert too_short.exit_code == 2
    assert "remember.for_seconds must be within" in too_short.stderr

    not_a_duration = shellgate(url, APPROVER, "approve", approval_id, "--remember", "--for", "soon")
    assert not_a_duration.exit_code == 2
    assert "'soon' is not a duration" in not_a_duration.output

    without_remember = shellgate(url, APPROVER, "approve", approval_id, "--scope", "all")
    assert without_remember.exit_code == 2
    assert "go with --remember" in without_remember.output

    with prompting.client(APPROVER) as carol:
        assert carol.get(f"/v1/approvals/{approval_id}").json()["state"] == "pending"
        remembered = carol.get("/v1/policy").json()["remembered"]
        assert [rule for rule in remembered if rule["approval_id"] == approval_id] == []


def test_approvals_of_every_state_show_who_decided_and_why(prompting: LiveServer) -> None:
    url = prompting.base_url
    approval_id = held_approval(prompting, "echo needs-approval-decided row")
    denied = shellgate(url, APPROVER, "deny", approval_id, "--reason", "not-this-one")
    assert denied.exit_code == 0, denied.output
    # The newest approval only: this one (the list is newest first).
    listing = shellgate(url, APPROVER, "approvals", "--state", "all", "--limit", "1")
    assert listing.exit_code == 0, listing.output
    assert "decided by" in listing.stdout and "reason" in listing.stdout
    assert approval_id[-8:] in listing.stdout, listing.stdout
    assert "carol" in listing.stdout and "not-this-one" in listing.stdout, listing.stdout
    pending = shellgate(url, APPROVER, "approvals")
    assert "decided by" not in pending.stdout
