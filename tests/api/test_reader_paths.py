"""Issue 28's families on every path a command takes, on both databases: REST foreground, the
dry run, the session runner (`/v1/sessions/{id}/run`), the MCP `bash` tool (the real MCP SDK
client) and a PTY run. Each sample form (tests/reader_corpus.py `PATH_SAMPLE`) gets the verdict
the reader gives it (deny or prompt, never allow) on every path; a prompted one is denied by a
human, and nothing runs: `forbidden` and `promptme` are marker scripts on the server's PATH
that would leave a mark, and `rm` only names an absent file."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from app.policy.engine import PolicyDocument, RuleAction, evaluate
from tests.api.test_mcp import mcp_client, structured, text_of
from tests.conftest import ADMIN, AGENT, LiveServer, make_settings, serve
from tests.databases import Databases
from tests.reader_corpus import PATH_SAMPLE, READER_POLICY
from tests.waiting import pending_approval_for

SAMPLE = [form for forms in PATH_SAMPLE.values() for form in forms]
POLICY = PolicyDocument.model_validate(READER_POLICY)
EXPECTED = {form: evaluate(POLICY, form).approval for form in SAMPLE}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Marked:
    """A server under READER_POLICY whose PATH has the marker programs, and their mark."""

    def __init__(self, live: LiveServer, marker: Path) -> None:
        self.live = live
        self.marker = marker

    def deny_pending(self, admin: httpx.Client, approval_id: str) -> None:
        response = admin.post(f"/v1/approvals/{approval_id}/deny", json={"reason": "corpus"})
        assert response.status_code == 200, response.text


@pytest.fixture(scope="module")
def marked(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[Marked]:
    root = tmp_path_factory.mktemp("reader-paths")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    marker = root / "ran"
    for name in ("forbidden", "promptme"):
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\necho "$0 $*" >> {marker}\n')
        script.chmod(0o755)
    policy_file = root / "policy.json"
    policy_file.write_text(json.dumps(READER_POLICY))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
        settings = make_settings(root, module_databases.new(), policy_file=policy_file)
        with serve(settings) as live:
            state = Marked(live, marker)
            # The marker programs run on this server when no rule stands in the way.
            with live.client(ADMIN) as admin, live.client(AGENT) as agent:
                assert admin.put("/v1/policy", json={"rules": []}).status_code == 200
                ran = agent.post("/v1/executions", json={"command": "forbidden probe"})
                assert ran.status_code == 200, ran.text
                assert marker.read_text() == f"{bin_dir / 'forbidden'} probe\n"
                marker.unlink()
                assert admin.put("/v1/policy", json=READER_POLICY).status_code == 200
            yield state


def test_every_sample_form_is_caught_by_the_reader() -> None:
    assert {form for form, verdict in EXPECTED.items() if verdict is RuleAction.allow} == set()
    assert {RuleAction.deny, RuleAction.prompt} <= set(EXPECTED.values())
    assert len(PATH_SAMPLE) == 9


def _execution(marked: Marked, form: str, **fields: Any) -> str:
    """POST /v1/executions (foreground unless `fields` say otherwise) and settle it."""
    with marked.live.client(AGENT) as agent, marked.live.client(ADMIN) as admin:
        response = agent.post("/v1/executions", json={"command": form, **fields})
        body = response.json()
        if response.status_code == 403:
            return "deny" if body["error"]["code"] == "policy_denied" else body["error"]["code"]
        if response.status_code == 202 and body.get("state") == "awaiting_approval":
            marked.deny_pending(admin, body["approval"]["id"])
            return "prompt"
        return f"{response.status_code} {body.get('state')}"


def _dry_run(marked: Marked, form: str) -> str:
    with marked.live.client(ADMIN) as admin:
        response = admin.post("/v1/policy/evaluate", json={"command": form})
    assert response.status_code == 200, response.text
    verdict: str = response.json()["verdict"]
    return verdict


def _session_run(marked: Marked, form: str) -> str:
    """The runner holds a prompted call until a human decides: deny it from another thread."""
    with marked.live.client(AGENT) as agent, marked.live.client(ADMIN) as admin:
        session = agent.post("/v1/sessions", json={})
        assert session.status_code == 201, session.text
        outcome: dict[str, Any] = {}

        def call() -> None:
            with marked.live.client(AGENT) as caller:
                response = caller.post(
                    f"/v1/sessions/{session.json()['id']}/run", json={"command": form}
                )
                outcome["status"] = response.status_code
                outcome["body"] = response.text

        thread = threading.Thread(target=call)
        thread.start()
        if EXPECTED[form] is RuleAction.prompt:
            thread.join(1)  # the runner's own patterns may refuse it before the policy
            if thread.is_alive():
                approval = pending_approval_for(admin, form, within=20)
                marked.deny_pending(admin, approval["id"])
        thread.join(30)
        assert not thread.is_alive()
    status, text = outcome["status"], outcome["body"]
    if status != 403:
        return f"{status} {text[:200]}"
    code = json.loads(text)["error"]["code"]
    message = json.loads(text)["error"]["message"]
    if code == "approval_rejected":
        return "prompt"
    if message.startswith("Pattern match found:"):
        return "refused by the runner's own pattern"
    return "deny" if code == "policy_denied" else code


async def _mcp_bash(marked: Marked, form: str) -> str:
    with anyio.fail_after(25):
        async with mcp_client(marked.live) as client:
            result = await client.call_tool("bash", {"command": form, "async": True})
    if result.is_error:
        text = text_of(result)
        return "deny" if "Blocked" in text or "Unreadable" in text else text
    held = structured(result)
    if held["state"] == "awaiting_approval":
        with marked.live.client(ADMIN) as admin:
            marked.deny_pending(admin, held["approval_id"])
        return "prompt"
    return str(held["state"])


PATHS = ["rest-foreground", "dry-run", "session-run", "mcp-bash", "pty"]


@pytest.mark.anyio
@pytest.mark.parametrize("path", PATHS)
async def test_each_family_is_caught_on_every_path_and_nothing_runs(
    marked: Marked, path: str
) -> None:
    outcomes: dict[str, str] = {}
    for form in SAMPLE:
        if path == "rest-foreground":
            outcome = await anyio.to_thread.run_sync(
                lambda f=form: _execution(marked, f, approval_wait=0)
            )
        elif path == "pty":
            outcome = await anyio.to_thread.run_sync(
                lambda f=form: _execution(marked, f, pty=True, **{"async": True})
            )
        elif path == "dry-run":
            outcome = await anyio.to_thread.run_sync(lambda f=form: _dry_run(marked, f))
        elif path == "session-run":
            outcome = await anyio.to_thread.run_sync(lambda f=form: _session_run(marked, f))
        else:
            outcome = await _mcp_bash(marked, form)
        outcomes[form] = outcome
    different = {
        form: (outcome, EXPECTED[form].value)
        for form, outcome in outcomes.items()
        if outcome != EXPECTED[form].value
        and not (path == "session-run" and outcome == "refused by the runner's own pattern")
    }
    through = {
        form: outcome
        for form, outcome in outcomes.items()
        if outcome not in ("deny", "prompt", "refused by the runner's own pattern")
    }
    assert through == {}
    assert different == {}
    assert not marked.marker.exists(), marked.marker.read_text()
