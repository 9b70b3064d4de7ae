"""`shellgate policy replay DRAFT` against a real server (docs/policy.md#replaying-a-draft):
past command approvals judged under a draft, through the SDK's `replay_policy`; the exit says
whether the draft would overrule a human (12) or not (0), and an agent is refused (exit 2)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from shellgate import Client
from tests.conftest import ADMIN, AGENT, APPROVER, LiveServer, make_settings, serve
from tests.databases import Databases
from tests.test_cli import shellgate

PROMPTING = {"default": "allow", "rules": [{"match": "echo replayed*", "approval": "prompt"}]}


@pytest.fixture(scope="module")
def decided(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[tuple[LiveServer, Path]]:
    """A server where one prompted call was approved and one denied; and a scratch directory
    for drafts."""
    tmp = tmp_path_factory.mktemp("cli-replay")
    policy = tmp / "policy.json"
    policy.write_text(json.dumps(PROMPTING))
    with serve(make_settings(tmp, module_databases.new(), policy_file=policy)) as live:
        with Client(live.base_url, AGENT) as agent, Client(live.base_url, APPROVER) as carol:
            for command, approve in (("echo replayed yes", True), ("echo replayed no", False)):
                held = agent.start(command)
                assert held.state == "awaiting_approval", held
                assert held.approval is not None
                carol.decide(held.approval.id, approve=approve, reason="replay test")
        yield live, tmp


def draft(directory: Path, name: str, document: dict[str, object]) -> str:
    path = directory / name
    path.write_text(json.dumps(document))
    return str(path)


def test_a_draft_that_allows_what_a_human_denied_exits_12_and_names_the_call(
    decided: tuple[LiveServer, Path],
) -> None:
    live, tmp = decided
    allow_all = draft(tmp, "allow-all.json", {"default": "allow", "rules": []})
    result = shellgate(live.base_url, APPROVER, "policy", "replay", allow_all)
    assert result.exit_code == 12, result.output
    summary, *rows = result.stdout.splitlines()
    assert summary.startswith("2 past calls: 1 agree, 1 against the human, 0 would still ask")
    (row,) = rows
    assert row.startswith("AGAINST  denied by carol -> draft allow: echo replayed no")


def test_a_draft_that_denies_what_was_denied_exits_0_and_lists_all_on_request(
    decided: tuple[LiveServer, Path],
) -> None:
    live, tmp = decided
    careful = draft(
        tmp,
        "careful.json",
        {
            "default": "allow",
            "rules": [
                {"match": "echo replayed no*", "approval": "deny"},
                {"match": "echo replayed yes*", "approval": "allow"},
            ],
        },
    )
    result = shellgate(live.base_url, ADMIN, "policy", "replay", careful, "--all")
    assert result.exit_code == 0, result.output
    rows = result.stdout.splitlines()[1:]
    assert sorted(row.split(": ", 1)[1].split("  [")[0] for row in rows) == [
        "echo replayed no",
        "echo replayed yes",
    ]
    assert all(row.startswith("agrees") for row in rows), rows

    as_json = shellgate(live.base_url, ADMIN, "policy", "replay", careful, "--json", "--limit", "1")
    answer = json.loads(as_json.stdout)
    assert len(answer["data"]) == 1 and answer["data"][0]["agrees"] is True, answer


def test_the_sdk_replays_with_a_window_and_an_agent_is_refused(
    decided: tuple[LiveServer, Path],
) -> None:
    live, tmp = decided
    with Client(live.base_url, APPROVER) as carol:
        replay = carol.replay_policy({"default": "deny", "rules": []}, limit=5)
        assert [item.human for item in replay.data] == ["denied", "approved"]  # newest first
        assert [item.command for item in replay.disagreements] == ["echo replayed yes"]
        assert carol.replay_policy({"default": "deny"}, since="2999-01-01T00:00:00").data == []
    refused = shellgate(live.base_url, AGENT, "policy", "replay", draft(tmp, "d.json", PROMPTING))
    assert refused.exit_code == 2, refused.output
