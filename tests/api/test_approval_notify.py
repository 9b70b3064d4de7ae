"""Approval events (docs/policy.md#hearing-of-prompts) through a real server to a real HTTP
receiver on loopback: a request and its decision each arrive signed, without env values; an
approval URL off the allow-list stops the start; a receiver that is down or slow holds up no
approval call, and gets the events, in order, once it answers."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from app.core.config import Settings
from app.notifications.signing import verify
from shellgate.webhooks import verify_signature
from tests.conftest import AGENT, APPROVER, free_port, make_settings, serve
from tests.databases import SQLITE, ServerDatabase
from tests.waiting import eventually
from tests.webhook_receiver import Receiver, webhook_receiver

SECRET = "notify-secret-0123456789"
PUBLIC_URL = "https://shellgate.example.com/gate"
POLICY = {"default": "allow", "rules": [{"match": "*ask-*", "approval": "prompt"}]}


def notifying_settings(tmp: Path, database: ServerDatabase, url: str) -> Settings:
    policy = tmp / "policy.json"
    policy.write_text(json.dumps(POLICY))
    return make_settings(
        tmp,
        database,
        policy_file=policy,
        notify_allow="http://127.0.0.1:*",
        notify_secret=SECRET,
        notify_backoff_seconds=0.2,
        notify_backoff_max_seconds=0.5,
        notify_timeout_seconds=3,
        approval_notify_url=url,
        public_url=PUBLIC_URL,
    )


def events(receiver: Receiver, count: int) -> list[dict[str, Any]]:
    """The first `count` events the receiver got, once it has them, each signature checked."""
    posts = eventually(
        lambda: (found := receiver.posts()) and len(found) >= count and found,
        what=f"{count} approval events at the receiver",
    )
    for post in posts:
        assert verify(SECRET, post.body, post.headers["x-shellgate-signature"])
    return [json.loads(post.body) for post in posts[:count]]


def test_a_new_approval_reaches_the_receiver_signed_without_env_values(
    tmp_path: Path, database: ServerDatabase
) -> None:
    with (
        webhook_receiver() as receiver,
        serve(notifying_settings(tmp_path, database, receiver.url())) as live,
        live.client(AGENT) as alice,
    ):
        response = alice.post(
            "/v1/executions",
            json={
                "command": "echo ask-me",
                "async": True,
                "env": {"DEPLOY_TOKEN": "hunter2-do-not-leak"},
            },
        )
        assert response.status_code == 202, response.text
        execution = response.json()
        [event] = events(receiver, 1)
        post = receiver.posts()[0]
    # The SDK's receiver-side check accepts what the server sends.
    assert verify_signature(post.body, post.headers["x-shellgate-signature"], SECRET) > 0
    assert not verify("another-secret-0123456789", post.body, post.headers["x-shellgate-signature"])
    assert post.headers["content-type"] == "application/json"
    assert post.headers["x-shellgate-event"] == "approval.requested"
    assert post.headers["x-shellgate-approval"] == execution["approval"]["id"]
    assert post.headers["x-shellgate-attempt"] == "1"
    assert post.headers["x-shellgate-event-id"] == event["id"]
    assert b"hunter2-do-not-leak" not in post.body
    approval = event["approval"]
    assert event["type"] == "approval.requested"
    assert approval["id"] == execution["approval"]["id"]
    assert approval["execution_id"] == execution["id"]
    assert approval["kind"] == "command"
    assert approval["state"] == "pending"
    assert approval["command"] == "echo ask-me"
    assert approval["requested_by"] == "alice"
    assert approval["reason"] == "Prompt required by bash pattern: *ask-*"
    assert approval["env_names"] == ["DEPLOY_TOKEN"]
    assert "env" not in approval
    assert approval["created_at"] is not None
    assert approval["decided_at"] is None and approval["decided_by"] is None
    assert event["console_url"] == f"{PUBLIC_URL}/console/#/executions/{execution['id']}"


def test_a_prompted_file_operation_is_heard_as_a_file_approval(
    tmp_path: Path, database: ServerDatabase
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "asked.txt"
    with (
        webhook_receiver() as receiver,
        serve(notifying_settings(tmp_path, database, receiver.url())) as live,
        live.client(AGENT) as alice,
    ):
        # Outside the workspace, the files policy prompts by default.
        asked = alice.put(
            "/v1/files", params={"path": str(target), "approval_wait": 0}, content=b"abc"
        )
        assert asked.status_code == 202, asked.text
        [event] = events(receiver, 1)
    approval = event["approval"]
    assert event["type"] == "approval.requested"
    assert approval["id"] == asked.json()["approval_id"]
    assert approval["kind"] == "file"
    assert approval["command"] == f"[file write] {target} (3 bytes)"
    assert approval["requested_by"] == "alice"
    assert not target.exists()


def test_a_sandbox_escalation_is_heard_with_what_it_asks(
    tmp_path: Path, database: ServerDatabase
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    with (
        webhook_receiver() as receiver,
        serve(notifying_settings(tmp_path, database, receiver.url())) as live,
        live.client(AGENT) as alice,
    ):
        asked = alice.post(
            "/v1/executions",
            json={
                "command": "echo report",
                "async": True,
                "sandbox": {"write": [str(outside)], "justification": "the report goes there"},
            },
        )
        assert asked.status_code == 202, asked.text
        [event] = events(receiver, 1)
    approval = event["approval"]
    assert approval["id"] == asked.json()["approval"]["id"]
    assert approval["kind"] == "sandbox"
    assert approval["sandbox_request"]["write"] == [str(outside)]
    assert approval["sandbox_request"]["justification"] == "the report goes there"


def test_decisions_reach_the_receiver_with_who_and_why(
    tmp_path: Path, database: ServerDatabase
) -> None:
    with (
        webhook_receiver() as receiver,
        serve(notifying_settings(tmp_path, database, receiver.url())) as live,
        live.client(AGENT) as alice,
        live.client(APPROVER) as carol,
    ):
        approved = alice.post("/v1/executions", json={"command": "echo ask-1", "async": True})
        cancelled = alice.post("/v1/executions", json={"command": "echo ask-2", "async": True})
        first = approved.json()["approval"]["id"]
        second = cancelled.json()
        decided = carol.post(f"/v1/approvals/{first}/approve", json={"reason": "fine"})
        assert decided.status_code == 200, decided.text
        cancel = alice.post(f"/v1/executions/{second['id']}/cancel")
        assert cancel.status_code == 200, cancel.text
        received = events(receiver, 4)
    decisions = {
        event["approval"]["id"]: event for event in received if event["type"] == "approval.decided"
    }
    assert set(decisions) == {first, second["approval"]["id"]}
    approval = decisions[first]["approval"]
    assert approval["state"] == "approved"
    assert approval["decided_by"] == "carol"
    assert approval["decision_reason"] == "fine"
    assert approval["decided_at"] is not None
    withdrawn = decisions[second["approval"]["id"]]["approval"]
    assert withdrawn["state"] == "expired"
    assert withdrawn["decision_reason"] == "execution cancelled by its requester"
    # Each approval's request is told before its decision.
    order = [(event["type"], event["approval"]["id"]) for event in received]
    assert order.index(("approval.requested", first)) < order.index(("approval.decided", first))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"notify_allow": "https://hooks.example.com/*"}, "matches no SHELLGATE_NOTIFY_ALLOW"),
        ({"notify_allow": ""}, "SHELLGATE_NOTIFY_ALLOW is empty"),
        ({"notify_secret": ""}, "needs SHELLGATE_NOTIFY_SECRET"),
    ],
)
def test_an_approval_url_the_settings_cannot_use_stops_the_start(
    tmp_path: Path, overrides: dict[str, str], message: str
) -> None:
    values = {
        "notify_allow": "http://127.0.0.1:*",
        "notify_secret": SECRET,
        "approval_notify_url": "http://127.0.0.1:9/hook",
        **overrides,
    }
    with pytest.raises(ValidationError) as refused:
        make_settings(tmp_path, SQLITE, **values)
    assert "approval_notify_url" in str(refused.value)
    assert message in str(refused.value)


def test_the_server_does_not_start_with_an_approval_url_off_the_allow_list(
    tmp_path: Path,
) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SHELLGATE_")}
    env.update(
        {
            "SHELLGATE_PORT": str(free_port()),
            "SHELLGATE_NOTIFY_ALLOW": "https://hooks.example.com/*",
            "SHELLGATE_NOTIFY_SECRET": SECRET,
            "SHELLGATE_APPROVAL_NOTIFY_URL": "http://127.0.0.1:9/hook",
        }
    )
    result = subprocess.run(
        [sys.executable, "-P", "-m", "app", "serve"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "approval_notify_url" in result.stderr
    assert "matches no SHELLGATE_NOTIFY_ALLOW pattern" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_receiver_that_is_down_fails_no_call_and_gets_the_events_once_up(
    tmp_path: Path, database: ServerDatabase
) -> None:
    port = free_port()  # nothing listens there yet
    url = f"http://127.0.0.1:{port}/hook"
    with (
        serve(notifying_settings(tmp_path, database, url)) as live,
        live.client(AGENT) as alice,
        live.client(APPROVER) as carol,
    ):
        response = alice.post("/v1/executions", json={"command": "echo ask-down", "async": True})
        assert response.status_code == 202, response.text
        approval_id = response.json()["approval"]["id"]
        denied = carol.post(f"/v1/approvals/{approval_id}/deny", json={"reason": "no"})
        assert denied.status_code == 200, denied.text
        hang_up_on_one_attempt(port)
        with webhook_receiver(port=port) as receiver:
            received = events(receiver, 2)
            first_post = receiver.posts()[0]
    assert [(event["type"], event["approval"]["state"]) for event in received] == [
        ("approval.requested", "pending"),
        ("approval.decided", "denied"),
    ]
    # The attempt the receiver got was a retry of the one it hung up on.
    assert int(first_post.headers["x-shellgate-attempt"]) > 1


def hang_up_on_one_attempt(port: int) -> None:
    """A receiver that is there but broken: it accepts the next attempt's connection and
    closes it unanswered (the attempt fails), then stops listening."""
    with socket.create_server(("127.0.0.1", port)) as listener:
        listener.settimeout(30)
        connection, _ = listener.accept()
        connection.close()


def test_a_receiver_holding_an_event_holds_up_no_approval_call(
    tmp_path: Path, database: ServerDatabase
) -> None:
    release = threading.Event()
    with webhook_receiver(script=[("hold", release)]) as receiver:
        try:
            with (
                serve(notifying_settings(tmp_path, database, receiver.url())) as live,
                live.client(AGENT) as alice,
                live.client(APPROVER) as carol,
            ):
                response = alice.post(
                    "/v1/executions", json={"command": "echo ask-slow", "async": True}
                )
                assert response.status_code == 202, response.text
                approval_id = response.json()["approval"]["id"]
                eventually(receiver.posts, what="the request's event at the receiver")
                # The receiver has not answered the first event: the decision is answered
                # all the same.
                decided = carol.post(f"/v1/approvals/{approval_id}/approve")
                assert decided.status_code == 200, decided.text
                assert not release.is_set()
                release.set()
                received = events(receiver, 2)
        finally:
            release.set()
    assert [event["type"] for event in received] == ["approval.requested", "approval.decided"]
