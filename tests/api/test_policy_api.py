"""The policy over HTTP (docs/policy.md): read, replace with validation and history,
dry-run evaluation, the policy file, and the verdicts as agents meet them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from app.governance.service import PolicyFileError, read_policy_file
from app.policy.env_rules import DEFAULT_ENV_DENY
from tests.conftest import (
    ADMIN,
    AGENT,
    APPROVER,
    TOKENS,
    LiveServer,
    free_port,
    make_settings,
    serve,
)
from tests.databases import Databases, ServerDatabase

DEFAULT_POLICY = {
    "default": "allow",
    "critical": "prompt",
    "unreadable": "prompt",
    "rules": [],
    "interceptor": {"enabled": False, "rules": None},
    "keep_daemons": False,
    "env": {"deny": list(DEFAULT_ENV_DENY), "prompt": []},
    "files": {"workspace": "allow", "outside": "prompt", "rules": []},
    "sandbox": {"network": None, "write": [], "hidden": [], "escalation": "prompt"},
    "remembered": [],
}
DENY_RM = {"rules": [{"match": "rm -rf *", "approval": "deny"}]}


@pytest.fixture(scope="module")
def policy_server(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[LiveServer]:
    """A server of this module's own: its tests replace the policy, which no other may see."""
    with serve(make_settings(tmp_path_factory.mktemp("policy"), module_databases.new())) as live:
        yield live


@pytest.fixture(scope="module")
def admin(policy_server: LiveServer) -> Iterator[httpx.Client]:
    with policy_server.client(ADMIN) as client:
        yield client


@pytest.fixture
def alice(policy_server: LiveServer) -> Iterator[httpx.Client]:
    with policy_server.client(AGENT) as client:
        yield client


def install(admin: httpx.Client, policy: dict[str, Any]) -> dict[str, Any]:
    response = admin.put("/v1/policy", json=policy)
    assert response.status_code == 200, response.text
    document: dict[str, Any] = response.json()
    return document


def execution_ids(admin: httpx.Client) -> set[str]:
    return {
        item["id"] for item in admin.get("/v1/executions", params={"limit": 500}).json()["data"]
    }


# --- read, replace, history -------------------------------------------------------------------


def test_every_role_reads_the_policy_and_the_default_allows(
    tmp_path: Path, database: ServerDatabase
) -> None:
    with serve(make_settings(tmp_path, database)) as live:
        for token in (AGENT, APPROVER, ADMIN):
            with live.client(token) as client:
                response = client.get("/v1/policy")
                assert response.status_code == 200
                assert response.json() == DEFAULT_POLICY


@pytest.mark.parametrize("token", [AGENT, APPROVER])
def test_only_an_admin_replaces_the_policy(
    policy_server: LiveServer, admin: httpx.Client, token: str
) -> None:
    before = admin.get("/v1/policy").json()
    with policy_server.client(token) as client:
        response = client.put("/v1/policy", json=DENY_RM | {"default": "deny"})
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"
    assert admin.get("/v1/policy").json() == before


def test_every_version_is_kept_with_its_author_and_time(
    admin: httpx.Client, alice: httpx.Client
) -> None:
    first = install(admin, {"default": "allow", "rules": [{"match": "git *", "approval": "allow"}]})
    second = install(admin, DENY_RM | {"critical": "deny"})
    assert second["critical"] == "deny"
    assert admin.get("/v1/policy").json() == second
    versions = alice.get("/v1/policy/versions").json()["data"]
    assert [version["document"] for version in versions[:2]] == [second, first]
    assert versions[0]["id"] > versions[1]["id"]
    for version in versions[:2]:
        assert version["author"] == "root"
        assert datetime.fromisoformat(version["created_at"]).tzinfo is not None


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        ({"interceptor": {"rules": [{"pattern": "(", "tool": "read"}]}}, "invalid regex"),
        (
            {"interceptor": {"rules": [{"pattern": "^cat", "flags": "ix", "tool": "read"}]}},
            "invalid regex flag",
        ),
        ({"rules": [{"match": "git *", "approval": "maybe"}]}, "allow"),
        ({"default": "sometimes"}, "allow"),
        ({"critical": "ignore"}, "allow"),
        ({"rules": [{"match": "   ", "approval": "deny"}]}, "blank"),
        ({"rules": [{"match": "git *", "approval": "allow", "why": "x"}]}, "Extra inputs"),
        ({"defaults": "allow"}, "Extra inputs"),
        ({"interceptor": {"enabled": True, "rule": []}}, "Extra inputs"),
        ({"rules": "rm -rf *"}, "list"),
    ],
)
def test_an_invalid_policy_is_refused_with_422_and_nothing_changes(
    admin: httpx.Client, body: dict[str, Any], complaint: str
) -> None:
    before = admin.get("/v1/policy").json()
    versions_before = admin.get("/v1/policy/versions").json()["data"]
    response = admin.put("/v1/policy", json=body)
    assert response.status_code == 422
    assert complaint in json.dumps(response.json())
    assert admin.get("/v1/policy").json() == before
    assert admin.get("/v1/policy/versions").json()["data"] == versions_before


def test_flags_g_u_y_are_accepted_and_change_nothing(admin: httpx.Client) -> None:
    document = install(
        admin,
        {
            "interceptor": {
                "enabled": True,
                "rules": [{"pattern": "^CAT ", "flags": "iguy", "tool": "read", "message": "m"}],
            }
        },
    )
    assert document["interceptor"]["rules"][0]["flags"] == "iguy"
    hit = admin.post("/v1/policy/evaluate", json={"command": "cat x", "tools": ["read"]}).json()
    assert hit["interception"]["tool"] == "read"


# --- dry run ----------------------------------------------------------------------------------


def test_evaluate_reports_verdict_rule_segments_and_critical_hits(
    admin: httpx.Client, alice: httpx.Client
) -> None:
    install(
        admin,
        {"rules": [{"match": "rm -rf *", "approval": "deny"}, {"match": "*", "approval": "allow"}]},
    )
    denied = alice.post(
        "/v1/policy/evaluate", json={"command": "echo start && rm -rf nonexistent-x"}
    ).json()
    assert denied["verdict"] == "deny"
    assert denied["reason"] == "Blocked by bash pattern: rm -rf *"
    assert denied["matched_rule"] == {"match": "rm -rf *", "approval": "deny"}
    assert denied["segments"] == ["echo start", "rm -rf nonexistent-x"]
    assert denied["critical_hits"] == []
    assert denied["interception"] is None

    critical = alice.post("/v1/policy/evaluate", json={"command": "mkfs.ext4 /dev/nonexistent"})
    body = critical.json()
    assert body["verdict"] == "prompt"
    assert body["reason"] == "Critical pattern detected"
    assert body["matched_rule"] == {"match": "*", "approval": "allow"}
    assert body["critical_hits"] == ["mkfs"]


def test_evaluate_is_a_dry_run_that_runs_nothing(
    policy_server: LiveServer, admin: httpx.Client, alice: httpx.Client
) -> None:
    install(admin, {})
    before = execution_ids(admin)
    marker = policy_server.settings.workspace / "dry-run-marker"
    response = alice.post("/v1/policy/evaluate", json={"command": f"touch {marker}"})
    assert response.status_code == 200
    assert response.json()["verdict"] == "allow"
    assert not marker.exists()
    assert execution_ids(admin) == before


def test_an_argument_that_looks_like_an_assignment_stays_readable_but_env_assigns(
    admin: httpx.Client, alice: httpx.Client
) -> None:
    """Issue 28: `echo "PAGER=$PAGER"` assigns nothing (it was held as unreadable), while
    `env NAME=value command` does assign, and the value is read as the shell text it is."""
    install(
        admin,
        {
            "default": "allow",
            "rules": [
                {"match": "rm *", "approval": "deny"},
                {"match": "curl *", "approval": "prompt"},
            ],
        },
    )
    for command in ('echo "PAGER=$PAGER"', "echo EDITOR=$HOME"):
        verdict = alice.post("/v1/policy/evaluate", json={"command": command}).json()
        assert verdict["verdict"] == "allow", (command, verdict)
        assert verdict["unreadable_reasons"] == [], (command, verdict)
    for command in (
        "env -i PAGER='rm -rf /nonexistent-x' git log",
        "env GIT_SSH_COMMAND='rm -rf /nonexistent-x' git fetch",
    ):
        verdict = alice.post("/v1/policy/evaluate", json={"command": command}).json()
        assert verdict["verdict"] == "deny", (command, verdict)
        assert verdict["reason"] == "Blocked by bash pattern: rm *"


def test_a_denied_command_reports_no_interception_because_deny_comes_first(
    admin: httpx.Client, alice: httpx.Client
) -> None:
    install(
        admin,
        {
            "rules": [{"match": "cat secret*", "approval": "deny"}],
            "interceptor": {"enabled": True},
        },
    )
    denied = alice.post(
        "/v1/policy/evaluate", json={"command": "cat secret.txt", "tools": ["read"]}
    ).json()
    assert denied["verdict"] == "deny"
    assert denied["interception"] is None
    allowed = alice.post(
        "/v1/policy/evaluate", json={"command": "cat notes.txt", "tools": ["read"]}
    ).json()
    assert allowed["verdict"] == "allow"
    assert allowed["interception"]["tool"] == "read"


# --- verdicts as agents meet them ---------------------------------------------------------------


def test_a_deny_rule_answers_403_policy_denied_naming_the_pattern(
    admin: httpx.Client, alice: httpx.Client
) -> None:
    install(admin, DENY_RM)
    response = alice.post("/v1/executions", json={"command": "rm -rf nonexistent-x"})
    assert response.status_code == 403
    error = response.json()["error"]
    assert error["code"] == "policy_denied"
    assert "Blocked by bash pattern: rm -rf *" in error["message"]
    assert error["details"]["rule"] == "rm -rf *"


def test_critical_deny_answers_critical_pattern_detected(
    admin: httpx.Client, alice: httpx.Client
) -> None:
    install(admin, {"critical": "deny", "rules": [{"match": "*", "approval": "allow"}]})
    before = execution_ids(admin)
    response = alice.post("/v1/executions", json={"command": "rm -rf /nonexistent-x"})
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "policy_denied"
    assert "Critical pattern detected" in response.json()["error"]["message"]
    assert execution_ids(admin) == before


def test_a_critical_command_beats_an_allow_rule_and_waits_for_approval(
    policy_server: LiveServer, admin: httpx.Client, alice: httpx.Client
) -> None:
    install(admin, {"critical": "prompt", "rules": [{"match": "*", "approval": "allow"}]})
    response = alice.post(
        "/v1/executions", json={"command": "rm -rf /nonexistent-x", "async": True}
    )
    assert response.status_code == 202
    body = response.json()
    assert body["state"] == "awaiting_approval"
    assert body["approval"]["reason"] == "Critical pattern detected"
    with policy_server.client(APPROVER) as carol:
        assert carol.post(f"/v1/approvals/{body['approval']['id']}/deny").status_code == 200
    assert alice.get(f"/v1/executions/{body['id']}").json()["state"] == "rejected"


def test_an_explicit_deny_beats_a_critical_pattern(
    admin: httpx.Client, alice: httpx.Client
) -> None:
    install(admin, DENY_RM | {"critical": "prompt"})
    response = alice.post("/v1/executions", json={"command": "rm -rf /nonexistent-x"})
    assert response.status_code == 403
    assert "Blocked by bash pattern: rm -rf *" in response.json()["error"]["message"]


BYPASS_FORMS = {
    "semicolon": "touch {m}; rm -rf nonexistent-x",
    "and": "touch {m} && rm -rf nonexistent-x",
    "or": "touch {m} || rm -rf nonexistent-x",
    "pipe": "touch {m} | rm -rf nonexistent-x",
    "background": "touch {m} & rm -rf nonexistent-x",
    "newline": "touch {m}\nrm -rf nonexistent-x",
    "command-substitution": "touch {m} $(rm -rf nonexistent-x)",
    "backticks": "touch {m} `rm -rf nonexistent-x`",
    "subshell": "touch {m}; ( rm -rf nonexistent-x )",
    "group": "touch {m}; {{ rm -rf nonexistent-x; }}",
    "bash-c": "bash -c 'touch {m}; rm -rf nonexistent-x'",
    "sh-c": 'sh -c "touch {m}; rm -rf nonexistent-x"',
    "quoted-name": 'touch {m}; "rm" -rf nonexistent-x',
    "spaces-and-tabs": "touch {m};   rm  \t -rf\t\tnonexistent-x",
    "wrapper": "touch {m}; timeout 5 rm -rf nonexistent-x",
}


@pytest.mark.parametrize("form", BYPASS_FORMS)
def test_a_deny_rule_cannot_be_bypassed_by_shell_syntax(
    policy_server: LiveServer, admin: httpx.Client, alice: httpx.Client, form: str
) -> None:
    install(admin, DENY_RM)
    marker = policy_server.settings.workspace / f"bypass-{form}"
    before = execution_ids(admin)
    response = alice.post("/v1/executions", json={"command": BYPASS_FORMS[form].format(m=marker)})
    assert response.status_code == 403, response.text
    assert response.json()["error"]["code"] == "policy_denied"
    assert "Blocked by bash pattern: rm -rf *" in response.json()["error"]["message"]
    assert execution_ids(admin) == before
    assert not marker.exists()


# --- the policy file ----------------------------------------------------------------------------

FILE_POLICY = {
    "default": "prompt",
    "critical": "deny",
    "unreadable": "deny",
    "rules": [{"match": "git *", "approval": "allow"}, {"match": "rm -rf *", "approval": "deny"}],
    "interceptor": {
        "enabled": True,
        "rules": [{"pattern": r"^\s*cat\s+", "flags": "", "tool": "read", "message": "Use read."}],
    },
    "env": {"deny": ["BASH_ENV", "LD_*"], "prompt": ["AWS_*"]},
    "files": {
        "workspace": "allow",
        "outside": "deny",
        "rules": [{"match": "/etc/*", "approval": "deny", "access": "write"}],
    },
    "sandbox": {
        "network": ["pypi.org:443"],
        "write": ["$WORKSPACE/out"],
        "hidden": ["~/.kube"],
        "escalation": "deny",
    },
}


@pytest.mark.parametrize("suffix", ["yaml", "json"])
def test_the_policy_file_seeds_an_empty_registry(
    tmp_path: Path, suffix: str, database: ServerDatabase
) -> None:
    path = tmp_path / f"policy.{suffix}"
    path.write_text(yaml.safe_dump(FILE_POLICY) if suffix == "yaml" else json.dumps(FILE_POLICY))
    with (
        serve(make_settings(tmp_path, database, policy_file=path)) as live,
        live.client(ADMIN) as root,
    ):
        assert root.get("/v1/policy").json() == {
            **FILE_POLICY,
            "keep_daemons": False,
            "remembered": [],
        }
        versions = root.get("/v1/policy/versions").json()["data"]
        assert [version["author"] for version in versions] == [f"file:policy.{suffix}"]
        denied = root.post("/v1/executions", json={"command": "rm -rf nonexistent-x"})
        assert denied.status_code == 403
        changed = FILE_POLICY | {"default": "allow"}
        assert root.put("/v1/policy", json=changed).status_code == 200
    # Restarted with the same file: the stored newest version wins over the file.
    with (
        serve(make_settings(tmp_path, database, policy_file=path)) as live,
        live.client(ADMIN) as root,
    ):
        assert root.get("/v1/policy").json() == {**changed, "keep_daemons": False, "remembered": []}


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("rules: [unclosed", "cannot read policy file"),
        ("- just\n- a list\n", "expected a mapping"),
        ("rules:\n  - {match: 'git *', approval: maybe}\n", "rules.0.approval"),
        ("interceptor:\n  rules:\n    - {pattern: '(', tool: read}\n", "invalid regex"),
        ("bogus: 1\n", "bogus: Extra inputs are not permitted"),
    ],
)
def test_a_bad_policy_file_is_refused_with_a_clear_message(
    tmp_path: Path, text: str, complaint: str
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(PolicyFileError) as refused:
        read_policy_file(path)
    assert str(path) in str(refused.value)
    assert complaint in str(refused.value)


def test_a_missing_policy_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PolicyFileError, match="cannot read policy file"):
        read_policy_file(tmp_path / "absent.yaml")


def test_an_empty_policy_file_means_the_default_policy(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("")
    assert read_policy_file(path).model_dump(mode="json") == DEFAULT_POLICY


def test_the_server_does_not_start_with_a_bad_policy_file(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("rules:\n  - {match: 'git *', approval: maybe}\n")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {
        **os.environ,
        "SHELLGATE_DATA_DIR": str(tmp_path / "data"),
        "SHELLGATE_WORKSPACE": str(workspace),
        "SHELLGATE_TOKENS": TOKENS,
        "SHELLGATE_PORT": str(free_port()),
        "SHELLGATE_POLICY_FILE": str(path),
    }
    finished = subprocess.run(
        [sys.executable, "-P", "-m", "app", "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert finished.returncode != 0
    assert f"invalid policy file {path}" in finished.stderr
    assert "rules.0.approval" in finished.stderr


def test_evaluate_refuses_a_command_longer_than_any_that_could_run(agent: httpx.Client) -> None:
    response = agent.post("/v1/policy/evaluate", json={"command": "echo " + "x" * 70_000})
    assert response.status_code == 422
    assert response.json()["error"]["message"] == "command is longer than 65536 bytes"


def test_evaluate_judges_a_long_compound_command(agent: httpx.Client) -> None:
    # Long enough to be parsed on a worker thread; the verdict must be the same.
    command = "; ".join(f"echo {i}" for i in range(1500)) + "; rm -rf /nonexistent-x"
    body = agent.post("/v1/policy/evaluate", json={"command": command}).json()
    assert body["verdict"] == "prompt"
    assert body["critical_hits"]
