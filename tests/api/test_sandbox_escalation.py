"""The policy's `sandbox` and asking for more, over HTTP (docs/policy.md#sandbox): validation,
escalation as an approval of kind `sandbox` (approved → it runs with exactly that; denied →
nothing ran), `escalation: deny` (403), a rule's widening, and sessions (409)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ADMIN, AGENT, AGENT2, APPROVER, LiveServer, make_settings, serve
from tests.databases import Databases
from tests.waiting import pending_approval_for


@pytest.fixture(scope="module")
def sandboxed(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[LiveServer]:
    """A server of this module's own: its tests replace the policy."""
    with serve(make_settings(tmp_path_factory.mktemp("sandbox"), module_databases.new())) as live:
        yield live


@pytest.fixture
def admin(sandboxed: LiveServer) -> Iterator[httpx.Client]:
    with sandboxed.client(ADMIN) as client:
        yield client


@pytest.fixture
def alice(sandboxed: LiveServer) -> Iterator[httpx.Client]:
    with sandboxed.client(AGENT) as client:
        yield client


@pytest.fixture
def carol(sandboxed: LiveServer) -> Iterator[httpx.Client]:
    with sandboxed.client(APPROVER) as client:
        yield client


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside the workspace (and outside every default writable path)."""
    directory = tmp_path / "outside"
    directory.mkdir()
    return directory


def install(admin: httpx.Client, policy: dict[str, Any]) -> dict[str, Any]:
    response = admin.put("/v1/policy", json=policy)
    assert response.status_code == 200, response.text
    document: dict[str, Any] = response.json()
    return document


def pending(client: httpx.Client) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = client.get("/v1/approvals", params={"state": "pending"}).json()[
        "data"
    ]
    return listed


# --- the policy's `sandbox` -------------------------------------------------------------------


def test_the_sandbox_object_reads_back_as_written_normalised(admin: httpx.Client) -> None:
    document = install(
        admin,
        {
            "sandbox": {
                "network": ["*.PyPI.org:443"],
                "write": ["$WORKSPACE/./build", "/srv/cache/"],
                "hidden": ["~/.aws"],
                "escalation": "Deny",
            },
            "rules": [
                {"match": "npm install *", "approval": "allow", "sandbox": {"network": "on"}},
                {"match": "git *", "approval": "allow"},
            ],
        },
    )
    assert document["sandbox"] == {
        "network": ["*.pypi.org:443"],
        "write": ["$WORKSPACE/build", "/srv/cache"],
        "hidden": ["~/.aws"],
        "escalation": "deny",
    }
    assert document["rules"][0]["sandbox"] == {"network": "on", "write": []}
    assert document["rules"][1] == {"match": "git *", "approval": "allow"}
    assert admin.get("/v1/policy").json() == document
    install(admin, {})
    assert admin.get("/v1/policy").json()["sandbox"] == {
        "network": None,
        "write": [],
        "hidden": [],
        "escalation": "prompt",
    }


@pytest.mark.parametrize(
    ("sandbox", "message"),
    [
        ({"write": ["build"]}, "must be absolute, or start with $WORKSPACE or ~"),
        ({"network": "maybe"}, 'network must be "on", "off" or a list of host[:port] globs'),
        ({"network": ["a b"]}, "is not a host[:port] glob"),
        ({"escalation": "allow"}, "Input should be 'prompt' or 'deny'"),
    ],
)
def test_an_invalid_sandbox_is_a_422_and_the_policy_stays(
    admin: httpx.Client, sandbox: dict[str, Any], message: str
) -> None:
    before = install(admin, {"sandbox": {"write": ["/srv/keep"]}})
    response = admin.put("/v1/policy", json={"sandbox": sandbox})
    assert response.status_code == 422
    assert any(message in item["msg"] for item in response.json()["detail"]), response.text
    assert admin.get("/v1/policy").json() == before


def test_a_write_path_the_server_hides_is_refused_hidden_wins(
    admin: httpx.Client, sandboxed: LiveServer
) -> None:
    before = install(admin, {})
    data = sandboxed.settings.data_dir
    for policy in (
        {"sandbox": {"write": [f"{data}/artifacts"]}},
        {"rules": [{"match": "x", "approval": "allow", "sandbox": {"write": [str(data)]}}]},
    ):
        response = admin.put("/v1/policy", json=policy)
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["code"] == "invalid_request"
        assert "is hidden from every command by the server" in error["message"]
        assert "hidden wins" in error["message"]
    assert admin.get("/v1/policy").json() == before


# --- asking for more --------------------------------------------------------------------------


def ask_to_write(alice: httpx.Client, target: Path, command: str, **fields: Any) -> dict[str, Any]:
    response = alice.post(
        "/v1/executions",
        json={
            "command": command,
            "sandbox": {"write": [str(target)], "justification": "the report goes there"},
            "approval_wait": 0,
            **fields,
        },
    )
    assert response.status_code == 202, response.text
    body: dict[str, Any] = response.json()
    assert body["state"] == "awaiting_approval"
    return body


def test_asking_to_write_outside_is_an_approval_and_approved_it_runs(
    admin: httpx.Client, alice: httpx.Client, carol: httpx.Client, outside: Path
) -> None:
    install(admin, {})
    command = f"echo approved > {outside}/report && echo wrote"
    body = ask_to_write(alice, outside, command)
    approval = pending_approval_for(carol, command)
    assert approval["id"] == body["approval"]["id"]
    assert approval["kind"] == "sandbox"
    assert approval["reason"] == f"Sandbox escalation requested: write {outside}"
    request = approval["sandbox_request"]
    assert request["write"] == [str(outside)]
    assert request["network"] is None
    assert request["justification"] == "the report goes there"
    assert str(outside) not in request["profile"]["write"]
    assert not (outside / "report").exists()  # nothing ran while it waited
    decided = carol.post(f"/v1/approvals/{approval['id']}/approve")
    assert decided.status_code == 200, decided.text
    record = alice.get(f"/v1/executions/{body['id']}", params={"wait": 30}).json()
    assert record["state"] == "completed", record
    assert record["output"] == "wrote\n"
    assert (outside / "report").read_text() == "approved\n"


def test_denied_nothing_ran(
    admin: httpx.Client, alice: httpx.Client, carol: httpx.Client, outside: Path
) -> None:
    install(admin, {})
    command = f"echo denied > {outside}/never"
    body = ask_to_write(alice, outside, command)
    approval = pending_approval_for(carol, command)
    assert carol.post(f"/v1/approvals/{approval['id']}/deny", json={"reason": "no"}).is_success
    record = alice.get(f"/v1/executions/{body['id']}", params={"wait": 30}).json()
    assert record["state"] == "rejected"
    assert record["started_at"] is None
    assert not (outside / "never").exists()


def test_escalation_deny_refuses_at_once_with_the_reason(
    admin: httpx.Client, alice: httpx.Client, outside: Path
) -> None:
    install(admin, {"sandbox": {"escalation": "deny", "network": "off"}})
    before = len(pending(alice))
    response = alice.post(
        "/v1/executions",
        json={
            "command": f"touch {outside}/x",
            "sandbox": {"write": [str(outside)], "network": "on"},
        },
    )
    assert response.status_code == 403, response.text
    error = response.json()["error"]
    assert error["code"] == "policy_denied"
    assert "sandbox.escalation is deny" in error["message"]
    assert f"write {outside}; network on" in error["message"]
    assert error["details"]["sandbox"] == {"write": [str(outside)], "network": "on"}
    assert len(pending(alice)) == before
    assert not (outside / "x").exists()
    install(admin, {})


def test_a_request_within_the_profile_runs_at_once(
    admin: httpx.Client, alice: httpx.Client, sandboxed: LiveServer, outside: Path
) -> None:
    install(admin, {"sandbox": {"write": [str(outside)]}})
    workspace = sandboxed.settings.workspace
    response = alice.post(
        "/v1/executions",
        json={
            "command": "echo inside",
            "sandbox": {"write": ["$WORKSPACE/sub", f"{outside}/deeper"], "network": "off"},
        },
    )
    assert response.status_code == 200, response.text
    assert response.json()["output"] == "inside\n"
    assert workspace.is_dir()
    install(admin, {})


def test_a_rules_widening_covers_what_it_matches_only(
    admin: httpx.Client, alice: httpx.Client, carol: httpx.Client, outside: Path
) -> None:
    install(
        admin,
        {
            "rules": [
                {
                    "match": "echo widened*",
                    "approval": "allow",
                    "sandbox": {"write": [str(outside)]},
                }
            ]
        },
    )
    sandbox = {"write": [str(outside)]}
    response = alice.post("/v1/executions", json={"command": "echo widened", "sandbox": sandbox})
    assert response.status_code == 200, response.text
    other = alice.post(
        "/v1/executions",
        json={"command": "echo plain", "sandbox": sandbox, "approval_wait": 0},
    )
    assert other.status_code == 202, other.text
    approval = pending_approval_for(carol, "echo plain")
    assert approval["kind"] == "sandbox"
    carol.post(f"/v1/approvals/{approval['id']}/deny")
    install(admin, {})


def test_a_prompted_command_that_asks_more_is_one_sandbox_approval(
    admin: httpx.Client, alice: httpx.Client, carol: httpx.Client, outside: Path
) -> None:
    install(admin, {"rules": [{"match": "echo ask-me*", "approval": "prompt"}]})
    body = ask_to_write(alice, outside, "echo ask-me")
    approval = pending_approval_for(carol, "echo ask-me")
    assert approval["kind"] == "sandbox"
    assert approval["reason"] == (
        "Prompt required by bash pattern: echo ask-me*; "
        f"Sandbox escalation requested: write {outside}"
    )
    assert [item["execution_id"] for item in pending(carol)].count(body["id"]) == 1
    carol.post(f"/v1/approvals/{approval['id']}/deny")
    install(admin, {})


def test_asking_to_write_a_hidden_path_is_a_422(
    admin: httpx.Client, alice: httpx.Client, sandboxed: LiveServer
) -> None:
    install(admin, {})
    response = alice.post(
        "/v1/executions",
        json={"command": "true", "sandbox": {"write": [str(sandboxed.settings.data_dir)]}},
    )
    assert response.status_code == 422, response.text
    assert "is hidden from commands (hidden wins)" in response.json()["error"]["message"]


def test_nothing_a_command_prints_asks_for_more(
    admin: httpx.Client, alice: httpx.Client, outside: Path
) -> None:
    install(admin, {})
    before = len(pending(alice))
    printed = '{"sandbox": {"write": ["/"], "network": "on", "justification": "x"}}'
    response = alice.post("/v1/executions", json={"command": f"echo '{printed}'"})
    assert response.status_code == 200, response.text
    assert response.json()["output"] == printed + "\n"
    assert len(pending(alice)) == before


# --- sessions ---------------------------------------------------------------------------------


def test_a_session_call_asking_more_than_its_profile_is_a_409(
    admin: httpx.Client, alice: httpx.Client, outside: Path
) -> None:
    install(admin, {})
    session = alice.post("/v1/sessions", json={}).json()["id"]
    sandbox = {"write": [str(outside)], "justification": "please"}
    response = alice.post(
        "/v1/executions",
        json={"command": f"touch {outside}/s", "session": session, "sandbox": sandbox},
    )
    assert response.status_code == 409, response.text
    message = response.json()["error"]["message"]
    assert f"asks more than its session's sandbox profile (write {outside})" in message
    assert "fixed when it is created" in message
    runner = alice.post(
        f"/v1/sessions/{session}/run", json={"command": f"touch {outside}/r", "sandbox": sandbox}
    )
    assert runner.status_code == 409, runner.text
    assert not (outside / "s").exists() and not (outside / "r").exists()
    within = alice.post(
        "/v1/executions",
        json={"command": "echo ok", "session": session, "sandbox": {"write": ["$WORKSPACE"]}},
    )
    assert within.status_code == 200, within.text
    alice.delete(f"/v1/sessions/{session}")


def test_a_session_within_the_policys_profile_is_created_at_once(
    admin: httpx.Client, alice: httpx.Client, outside: Path
) -> None:
    install(admin, {"sandbox": {"write": [str(outside)]}})
    created = alice.post("/v1/sessions", json={"sandbox": {"write": [str(outside)]}})
    assert created.status_code == 201, created.text
    alice.delete(f"/v1/sessions/{created.json()['id']}")
    install(admin, {})


def test_a_session_asking_more_waits_for_an_approval_and_is_made_once(
    admin: httpx.Client, alice: httpx.Client, carol: httpx.Client, outside: Path
) -> None:
    install(admin, {})
    sandbox = {"write": [str(outside)], "justification": "a build session"}
    asked = alice.post("/v1/sessions", json={"sandbox": sandbox, "approval_wait": 0})
    assert asked.status_code == 202, asked.text
    pending_body = asked.json()
    assert pending_body["state"] == "awaiting_approval"
    assert "execution_id" not in pending_body
    approval_id = pending_body["approval"]["id"]
    approval = carol.get(f"/v1/approvals/{approval_id}").json()
    assert approval["kind"] == "sandbox"
    # Its subject is the session to be: no execution record stands in for it.
    assert approval["subject"] == "session"
    assert approval["execution_id"] is None and approval["file_operation_id"] is None
    assert approval["command"] == f"[new session] sandbox: write {outside}"
    assert approval["sandbox_request"]["justification"] == "a build session"
    # Still pending: asking again with the approval answers 202 again, nothing is made.
    again = alice.post("/v1/sessions", json={"sandbox": sandbox, "approval_id": approval_id})
    assert again.status_code == 202, again.text
    other = alice.post(
        "/v1/sessions", json={"sandbox": {"write": ["/srv/else"]}, "approval_id": approval_id}
    )
    assert other.status_code == 409, other.text
    assert "not for this request's sandbox" in other.json()["error"]["message"]
    assert carol.post(f"/v1/approvals/{approval_id}/approve").is_success
    created = alice.post("/v1/sessions", json={"sandbox": sandbox, "approval_id": approval_id})
    assert created.status_code == 201, created.text
    session = created.json()["id"]
    used = alice.post("/v1/sessions", json={"sandbox": sandbox, "approval_id": approval_id})
    assert used.status_code == 409, used.text
    assert "already used to create a session" in used.json()["error"]["message"]
    alice.delete(f"/v1/sessions/{session}")


def test_a_session_call_held_for_its_approval_is_made_when_approved(
    admin: httpx.Client, sandboxed: LiveServer, carol: httpx.Client, outside: Path
) -> None:
    install(admin, {})
    sandbox = {"write": [str(outside)]}
    with ThreadPoolExecutor(1) as pool:

        def create() -> httpx.Response:
            with sandboxed.client(AGENT) as client:
                return client.post("/v1/sessions", json={"sandbox": sandbox, "approval_wait": 30})

        held = pool.submit(create)
        approval = pending_approval_for(carol, f"[new session] sandbox: write {outside}")
        assert carol.post(f"/v1/approvals/{approval['id']}/approve").is_success
        created = held.result(timeout=30)
    assert created.status_code == 201, created.text
    with sandboxed.client(AGENT) as alice:
        alice.delete(f"/v1/sessions/{created.json()['id']}")


def test_a_session_whose_sandbox_is_denied_is_never_made(
    admin: httpx.Client, alice: httpx.Client, carol: httpx.Client, outside: Path
) -> None:
    install(admin, {})
    sandbox = {"network": "on", "write": [str(outside)]}
    asked = alice.post("/v1/sessions", json={"sandbox": sandbox, "approval_wait": 0}).json()
    approval_id = asked["approval"]["id"]
    carol.post(f"/v1/approvals/{approval_id}/deny", json={"reason": "too wide"})
    refused = alice.post("/v1/sessions", json={"sandbox": sandbox, "approval_id": approval_id})
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "approval_rejected"
    assert refused.json()["error"]["message"] == "Approval denied by carol: too wide"


def test_a_session_request_writes_no_execution_record(
    admin: httpx.Client, alice: httpx.Client, carol: httpx.Client, outside: Path
) -> None:
    install(admin, {})
    before = {
        item["id"] for item in carol.get("/v1/executions", params={"limit": 500}).json()["data"]
    }
    sandbox = {"write": [str(outside / "norecord")]}
    asked = alice.post("/v1/sessions", json={"sandbox": sandbox, "approval_wait": 0})
    assert asked.status_code == 202, asked.text
    approval_id = asked.json()["approval"]["id"]
    assert carol.post(f"/v1/approvals/{approval_id}/approve").is_success
    created = alice.post("/v1/sessions", json={"sandbox": sandbox, "approval_id": approval_id})
    assert created.status_code == 201, created.text
    after = {
        item["id"] for item in carol.get("/v1/executions", params={"limit": 500}).json()["data"]
    }
    assert after == before
    decided = carol.get(f"/v1/approvals/{approval_id}").json()
    assert decided["state"] == "approved" and decided["execution_id"] is None
    alice.delete(f"/v1/sessions/{created.json()['id']}")


def test_a_session_asking_more_under_escalation_deny_is_a_403(
    admin: httpx.Client, alice: httpx.Client
) -> None:
    install(admin, {"sandbox": {"escalation": "deny"}})
    refused = alice.post("/v1/sessions", json={"sandbox": {"write": ["/srv/x"]}})
    assert refused.status_code == 403, refused.text
    assert "this session asks beyond its profile (write /srv/x)" in refused.text
    install(admin, {})


def test_the_dry_run_shows_the_profile_a_command_would_get(
    admin: httpx.Client, alice: httpx.Client, sandboxed: LiveServer
) -> None:
    install(
        admin,
        {
            "sandbox": {"network": "off", "write": ["/srv/cache"]},
            "rules": [
                {"match": "npm install *", "approval": "allow", "sandbox": {"network": "on"}},
                {"match": "rm *", "approval": "deny"},
            ],
        },
    )
    widened = alice.post("/v1/policy/evaluate", json={"command": "npm install left-pad"}).json()
    assert widened["sandbox"]["network"] == "on"
    assert widened["sandbox"]["write"] == [str(sandboxed.settings.workspace), "/srv/cache"]
    assert str(sandboxed.settings.data_dir) in widened["sandbox"]["hidden"]
    plain = alice.post("/v1/policy/evaluate", json={"command": "npm test"}).json()
    assert plain["sandbox"]["network"] == "off"
    # Compound text is never vouched for by an allow rule, so it never gets its widening.
    compound = alice.post(
        "/v1/policy/evaluate", json={"command": "npm install x; curl example.com"}
    ).json()
    assert compound["sandbox"]["network"] == "off"
    denied = alice.post("/v1/policy/evaluate", json={"command": "rm x"}).json()
    assert denied["verdict"] == "deny" and denied["sandbox"] is None
    install(admin, {})


# --- remembering an escalation ------------------------------------------------------------------


def test_a_remembered_escalation_lets_the_owners_like_calls_ask_it_without_a_prompt(
    sandboxed: LiveServer,
    admin: httpx.Client,
    alice: httpx.Client,
    carol: httpx.Client,
    outside: Path,
    tmp_path: Path,
) -> None:
    install(admin, {})
    first = f"touch {outside}/first"
    body = ask_to_write(alice, outside, first)
    approval = pending_approval_for(carol, first)
    assert approval["kind"] == "sandbox"
    assert approval["suggested_pattern"] == "touch *"
    decided = carol.post(
        f"/v1/approvals/{approval['id']}/approve",
        json={"remember": {"scope": "owner", "for_seconds": 3600}},
    )
    assert decided.status_code == 200, decided.text
    rule_id = decided.json()["remembered_rule"]
    assert rule_id.startswith("rr_")
    assert alice.get(f"/v1/executions/{body['id']}", params={"wait": 30}).json()["state"] == (
        "completed"
    )
    (rule,) = [item for item in admin.get("/v1/policy").json()["remembered"]]
    assert (rule["id"], rule["owner"]) == (rule_id, "alice")
    assert rule["sandbox"] == {"network": None, "write": [str(outside)]}

    # The owner's like call asking the same (or less) runs at once, naming the rule.
    again = alice.post(
        "/v1/executions",
        json={
            "command": f"touch {outside}/second",
            "sandbox": {"write": [f"{outside}/second"]},
        },
    )
    assert again.status_code == 200, again.text
    record = again.json()
    assert record["state"] == "completed", record
    assert record["remembered_rule"] == rule_id
    assert (
        f"Sandbox escalation (write {outside}/second) allowed by remembered rule {rule_id}"
        in (record["reason"])
    )

    # Asking beyond what was remembered, another owner, or another command: a human decides.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    beyond_it = ask_to_write(alice, elsewhere, f"touch {elsewhere}/third")
    with sandboxed.client(AGENT2) as bob:
        bobs = ask_to_write(bob, outside, f"touch {outside}/bobs")
    other = ask_to_write(alice, outside, "echo another-command")
    for held in (beyond_it, bobs, other):
        assert held["approval"]["id"], held
        carol.post(f"/v1/approvals/{held['approval']['id']}/deny")


def test_a_session_sandbox_approval_cannot_be_remembered(
    admin: httpx.Client, alice: httpx.Client, carol: httpx.Client, outside: Path
) -> None:
    install(admin, {})
    created = alice.post(
        "/v1/sessions", json={"sandbox": {"write": [str(outside)]}, "approval_wait": 0}
    )
    assert created.status_code == 202, created.text
    (approval,) = [
        item
        for item in pending(carol)
        if item["kind"] == "sandbox" and item["sandbox_request"]["write"] == [str(outside)]
    ]
    refused = carol.post(
        f"/v1/approvals/{approval['id']}/approve",
        json={"remember": {"scope": "owner", "for_seconds": 3600}},
    )
    assert refused.status_code == 422, refused.text
    assert "a session's sandbox" in refused.json()["error"]["message"]
    carol.post(f"/v1/approvals/{approval['id']}/deny")


def test_the_files_api_cannot_read_what_the_policys_sandbox_hides(
    sandboxed: LiveServer, admin: httpx.Client
) -> None:
    """What the policy's `sandbox.hidden` hides from commands, the files API does not reach
    either; under the next policy version without it, it does again."""
    secrets = sandboxed.settings.workspace / "policy-hidden"
    secrets.mkdir(exist_ok=True)
    (secrets / "key").write_text("not for agents\n")
    install(admin, {"sandbox": {"hidden": ["$WORKSPACE/policy-hidden"]}})
    for path in ("policy-hidden/key", "policy-hidden"):
        refused = admin.get("/v1/files", params={"path": path})
        assert refused.status_code == 403, (path, refused.text)
        assert "hidden by the sandbox" in refused.json()["error"]["message"]
    install(admin, {})
    allowed = admin.get("/v1/files", params={"path": "policy-hidden/key"})
    assert (allowed.status_code, allowed.text) == (200, "not for agents\n")
