"""The bypass corpus against a real server: the denied marker command never runs.

`launchmissiles` is a harmless script that appends to a marker file in this test's tmp dir; it
is on PATH only while this test's server runs. Every form must end 403 `policy_denied` or
`awaiting_approval` (the approval is then denied, so nothing ever runs), and the marker file
must never appear.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.conftest import ADMIN, AGENT, make_settings, serve
from tests.databases import ServerDatabase
from tests.policy_corpus import BENIGN_COMMANDS, BYPASS_FORMS, MARKER_COMMAND, REALISTIC_POLICY


def _install_marker_command(tmp_path: Path) -> tuple[Path, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "missiles-launched"
    script = bin_dir / MARKER_COMMAND
    script.write_text(f'#!/bin/sh\necho "$0 $*" >> {marker}\n')
    script.chmod(0o755)
    return bin_dir, marker


def test_no_bypass_form_runs_the_denied_command_on_a_real_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, database: ServerDatabase
) -> None:
    bin_dir, marker = _install_marker_command(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    policy_file = tmp_path / "policy.json"
    policy_file.write_text(json.dumps(REALISTIC_POLICY))
    outcomes: dict[str, str] = {}
    with (
        serve(make_settings(tmp_path, database, policy_file=policy_file)) as live,
        live.client(AGENT) as agent,
        live.client(ADMIN) as admin,
    ):
        # The marker command itself works on this server: only the policy stands in the way.
        probe = admin.put("/v1/policy", json=REALISTIC_POLICY | {"rules": []})
        assert probe.status_code == 200
        ran = agent.post("/v1/executions", json={"command": f"{MARKER_COMMAND} probe"})
        assert ran.status_code == 200, ran.text
        assert marker.read_text() == f"{bin_dir / MARKER_COMMAND} probe\n"
        marker.unlink()
        assert admin.put("/v1/policy", json=REALISTIC_POLICY).status_code == 200

        for form in BYPASS_FORMS:
            response = agent.post("/v1/executions", json={"command": form, "async": True})
            body = response.json()
            if response.status_code == 403:
                outcomes[form] = body["error"]["code"]
            elif response.status_code == 202 and body.get("state") == "awaiting_approval":
                outcomes[form] = "awaiting_approval"
                decided = admin.post(
                    f"/v1/approvals/{body['approval']['id']}/deny", json={"reason": "corpus"}
                )
                assert decided.status_code == 200, decided.text
            else:
                outcomes[form] = f"{response.status_code} {body.get('state')}"
    unexpected = {
        form: outcome
        for form, outcome in outcomes.items()
        if outcome not in ("policy_denied", "awaiting_approval")
    }
    assert unexpected == {}
    assert len(outcomes) == len(BYPASS_FORMS)
    assert not marker.exists(), marker.read_text()


def test_benign_commands_are_allowed_by_a_real_server(
    tmp_path: Path, database: ServerDatabase
) -> None:
    # Judged by the server's dry run (nothing runs): the policy it loaded from the file
    # allows every one of them.
    policy_file = tmp_path / "policy.json"
    policy_file.write_text(json.dumps(REALISTIC_POLICY))
    with (
        serve(make_settings(tmp_path, database, policy_file=policy_file)) as live,
        live.client(ADMIN) as admin,
    ):
        prompted = []
        for command in BENIGN_COMMANDS:
            response = admin.post("/v1/policy/evaluate", json={"command": command})
            assert response.status_code == 200, response.text
            if response.json()["verdict"] != "allow":
                prompted.append(command)
    assert prompted == []


def test_a_pathological_interceptor_regex_never_stalls_the_server(
    tmp_path: Path, database: ServerDatabase
) -> None:
    with serve(make_settings(tmp_path, database)) as live, live.client(ADMIN) as admin:
        refused = admin.put(
            "/v1/policy",
            json={"interceptor": {"enabled": True, "rules": [{"pattern": r"(a)\1", "tool": "t"}]}},
        )
        assert refused.status_code == 422
        assert "RE2" in refused.text
        policy = {"interceptor": {"enabled": True, "rules": [{"pattern": "^(a+)+$", "tool": "t"}]}}
        assert admin.put("/v1/policy", json=policy).status_code == 200
        for size in (25, 30_000):
            started = time.monotonic()
            response = admin.post(
                "/v1/policy/evaluate", json={"command": "a" * size + "!", "tools": ["t"]}
            )
            assert response.status_code == 200
            assert response.json()["interception"] is None
            # Python `re` needs tens of seconds for 25 `a`s; RE2 is linear.
            assert time.monotonic() - started < 5
        hit = admin.post("/v1/policy/evaluate", json={"command": "aaaa", "tools": ["t"]})
        assert hit.json()["interception"]["tool"] == "t"


def test_no_form_splitting_a_denied_command_into_words_runs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, database: ServerDatabase
) -> None:
    # `echo launchmissiles fire | bash` runs one line the reader saw only as separate words;
    # a session's calls run with aliases expanded: `m fire` is `launchmissiles fire` to bash.
    # The deny rule must see the whole command in each.
    bin_dir, marker = _install_marker_command(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    policy_file = tmp_path / "policy.json"
    policy_file.write_text(
        json.dumps({"rules": [{"match": f"{MARKER_COMMAND} fire*", "approval": "deny"}]})
    )
    with (
        serve(make_settings(tmp_path, database, policy_file=policy_file)) as live,
        live.client(AGENT) as agent,
    ):
        session = agent.post("/v1/sessions", json={}).json()["id"]
        probe = agent.post(
            "/v1/executions", json={"command": f"{MARKER_COMMAND} probe", "session": session}
        )
        assert probe.status_code == 200, probe.text
        assert marker.read_text() == f"{bin_dir / MARKER_COMMAND} probe\n"
        marker.unlink()
        for request in (
            {"command": f"echo {MARKER_COMMAND} fire | bash"},
            {"command": f"echo {MARKER_COMMAND} fire | xargs -I X sh -c X"},
            {"command": f"alias m={MARKER_COMMAND}\nm fire", "session": session},
            {"command": f"alias m='{MARKER_COMMAND} '\nm fire", "session": session},
            {"command": f"shopt -s expand_aliases\nalias m={MARKER_COMMAND}\nm fire"},
        ):
            response = agent.post("/v1/executions", json=request)
            assert response.status_code == 403, response.text
            assert response.json()["error"]["details"] == {"rule": f"{MARKER_COMMAND} fire*"}
    assert not marker.exists(), marker.read_text()


def test_an_allowlist_runs_nothing_an_allowed_program_would_hand_a_command_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, database: ServerDatabase
) -> None:
    """Under `default: deny`, `git *` and `timeout *` allowed git and timeout, which then ran
    the marker, which no rule allows."""
    bin_dir, marker = _install_marker_command(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    allowlist = {
        "default": "deny",
        "rules": [
            {"match": "git *", "approval": "allow"},
            {"match": "timeout *", "approval": "allow"},
            {"match": "true", "approval": "allow"},
        ],
    }
    policy_file = tmp_path / "policy.json"
    policy_file.write_text(json.dumps(allowlist))
    with (
        serve(make_settings(tmp_path, database, policy_file=policy_file)) as live,
        live.client(AGENT) as agent,
    ):
        assert agent.post("/v1/executions", json={"command": "timeout 5 true"}).status_code == 200
        for command in (
            f"timeout 5 {MARKER_COMMAND} fire",
            f"git -c alias.x=!{MARKER_COMMAND} x",
            f"git -c core.pager={MARKER_COMMAND} -p log",
        ):
            response = agent.post("/v1/executions", json={"command": command})
            assert response.status_code == 403, response.text
            assert response.json()["error"]["message"] == "No rule matched; default deny"
    assert not marker.exists(), marker.read_text()


def test_the_reader_corpus_is_caught_and_everyday_commands_allowed_by_a_real_server(
    tmp_path: Path, database: ServerDatabase
) -> None:
    # Issue 28's families (tests/reader_corpus.py) on the REST path: each form is refused or
    # waits for an approval (denied here, so nothing runs); the everyday corpus, by dry run, is
    # allowed. `forbidden` is on no PATH and `rm` only names absent files.
    from tests.reader_corpus import BYPASS_FORMS as READER_FORMS
    from tests.reader_corpus import READER_POLICY
    from tests.test_policy_reader_corpus import EVERYDAY

    policy_file = tmp_path / "policy.json"
    policy_file.write_text(json.dumps(READER_POLICY))
    through: dict[str, str] = {}
    with (
        serve(make_settings(tmp_path, database, policy_file=policy_file)) as live,
        live.client(AGENT) as agent,
        live.client(ADMIN) as admin,
    ):
        for form in READER_FORMS:
            response = agent.post("/v1/executions", json={"command": form, "async": True})
            body = response.json()
            if response.status_code == 202 and body.get("state") == "awaiting_approval":
                decided = admin.post(
                    f"/v1/approvals/{body['approval']['id']}/deny", json={"reason": "corpus"}
                )
                assert decided.status_code == 200, decided.text
            elif response.status_code != 403:
                through[form] = f"{response.status_code} {body.get('state')}"
        prompted = [
            command
            for command in EVERYDAY
            if admin.post("/v1/policy/evaluate", json={"command": command}).json()["verdict"]
            != "allow"
        ]
    assert through == {}
    assert prompted == []
