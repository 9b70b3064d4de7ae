"""`GET /v1/executions/{id}/events`: Server-Sent Events read by httpx: the state changes and
the final record, heartbeats while nothing changes, resume with Last-Event-ID."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.core.config import Settings
from tests.conftest import AGENT2, APPROVER, LiveServer, make_settings, serve
from tests.databases import SQLITE
from tests.waiting import eventually
from tests.webhook_receiver import webhook_receiver


def iter_events(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """Each event (id, event, data) of an open stream, as it comes; comments as {"comment"}."""
    current: dict[str, Any] = {}
    for line in response.iter_lines():
        if line.startswith(":"):
            yield {"comment": line}
        elif line == "":
            if "event" in current:
                yield current
            current = {}
        else:
            name, _, value = line.partition(": ")
            current[name] = json.loads(value) if name == "data" else value


def read_events(
    client: httpx.Client, execution_id: str, last_event_id: str | None = None
) -> tuple[int, list[dict[str, Any]], list[str]]:
    """The status, the events and the comment lines of one whole stream."""
    headers = {"Last-Event-ID": last_event_id} if last_event_id is not None else {}
    events: list[dict[str, Any]] = []
    comments: list[str] = []
    with client.stream(
        "GET", f"/v1/executions/{execution_id}/events", headers=headers, timeout=60
    ) as response:
        if response.status_code != 200:
            return response.status_code, [], []
        assert response.headers["content-type"].startswith("text/event-stream")
        for item in iter_events(response):
            if "comment" in item:
                comments.append(item["comment"])
            else:
                events.append(item)
    return 200, events, comments


@pytest.mark.settings(sse_heartbeat_seconds=0.2)
def test_a_job_streams_running_then_its_final_record_and_heartbeats(
    fresh_server: LiveServer,
) -> None:
    with fresh_server.client() as client:
        started = client.post(
            "/v1/executions", json={"command": "sleep 1.5; echo finished", "async": True}
        ).json()
        status, events, comments = read_events(client, started["id"])
        record = client.get(f"/v1/executions/{started['id']}").json()
    assert status == 200
    assert [(event["id"], event["event"]) for event in events] == [("2", "state"), ("3", "end")]
    assert events[0]["data"]["state"] == "running"
    assert events[1]["data"] == record
    assert record["state"] == "completed" and record["text"].startswith("finished")
    assert ": keepalive" in comments


def test_resume_after_the_running_event_gets_only_the_end(agent: httpx.Client) -> None:
    started = agent.post(
        "/v1/executions", json={"command": "sleep 1; echo resumed", "async": True}
    ).json()
    status, events, _ = read_events(agent, started["id"], last_event_id="2")
    assert status == 200
    assert [(event["id"], event["event"]) for event in events] == [("3", "end")]
    assert events[0]["data"]["output"] == "resumed\n"


def test_a_finished_execution_streams_its_end_at_once_and_204_once_seen(
    agent: httpx.Client,
) -> None:
    done = agent.post("/v1/executions", json={"command": "echo quick"}).json()
    status, events, _ = read_events(agent, done["id"])
    assert status == 200
    assert [event["event"] for event in events] == ["end"]
    assert events[0]["data"]["id"] == done["id"]
    again, _, _ = read_events(agent, done["id"], last_event_id="3")
    assert again == 204


def test_events_follow_read_access(server: LiveServer, agent: httpx.Client) -> None:
    done = agent.post("/v1/executions", json={"command": "true"}).json()
    with server.client(AGENT2) as other:
        assert other.get(f"/v1/executions/{done['id']}/events").status_code == 404
    with server.client(APPROVER) as approver:
        status, events, _ = read_events(approver, done["id"])
    assert status == 200 and events[0]["event"] == "end"
    # `²` passes `isdigit()` and 5000 digits pass it too; `int()` refused both: a 500.
    for last in ("x", "9" * 5000, "\u00b2".encode("latin-1"), "4"):
        bad = agent.get(f"/v1/executions/{done['id']}/events", headers={"Last-Event-ID": last})
        assert bad.status_code == 422, bad.text
        assert bad.json()["error"]["message"] == "Last-Event-ID must be 0..3, the id of an event"


def gated_settings(tmp_path: Path) -> Settings:
    """`*ask-*` needs an approval; webhooks to loopback allowed."""
    policy = tmp_path / "policy.json"
    rules = [{"match": "*ask-*", "approval": "prompt"}]
    policy.write_text(json.dumps({"default": "allow", "rules": rules}))
    return make_settings(
        tmp_path,
        SQLITE,
        policy_file=policy,
        notify_allow="http://127.0.0.1:*",
        notify_secret="notify-secret-0123456789",
    )


def test_an_approved_command_streams_awaiting_running_end_and_keeps_its_notify_url(
    tmp_path: Path,
) -> None:
    """The prompt verdict's path: the stream shows all three events, and the notify_url given
    with the request survives the approval (it is stored with the draft) and is delivered."""
    settings = gated_settings(tmp_path)
    with webhook_receiver() as receiver, serve(settings) as server:
        with server.client() as client, server.client(APPROVER) as approver:
            body = client.post(
                "/v1/executions",
                json={"command": "echo ask-me", "approval_wait": 0, "notify_url": receiver.url()},
            ).json()
            assert body["state"] == "awaiting_approval"
            assert body["notify_state"] == "waiting"
            with ThreadPoolExecutor(1) as pool:
                stream = pool.submit(read_events, client, body["id"])
                decided = approver.post(f"/v1/approvals/{body['approval']['id']}/approve")
                assert decided.status_code == 200
                status, events, _ = stream.result(60)
            eventually(receiver.posts, what="the delivery", within=30)
        [post] = receiver.posts()
    assert status == 200
    assert [(event["id"], event["data"]["state"]) for event in events][-1] == ("3", "completed")
    assert events[0]["id"] in ("1", "2")  # the approval may land before the stream opens
    assert [event["id"] for event in events] == sorted(event["id"] for event in events)
    assert json.loads(post.body)["output"] == "ask-me\n"


def test_a_denied_command_streams_awaiting_then_end_and_is_delivered_as_rejected(
    tmp_path: Path,
) -> None:
    settings = gated_settings(tmp_path)
    with webhook_receiver() as receiver, serve(settings) as server:
        with server.client() as client, server.client(APPROVER) as approver:
            body = client.post(
                "/v1/executions",
                json={"command": "echo ask-no", "approval_wait": 0, "notify_url": receiver.url()},
            ).json()
            events: list[dict[str, Any]] = []
            with client.stream("GET", f"/v1/executions/{body['id']}/events") as response:
                for event in iter_events(response):
                    if "comment" in event:
                        continue
                    events.append(event)
                    if len(events) == 1:
                        denied = approver.post(
                            f"/v1/approvals/{body['approval']['id']}/deny", json={"reason": "no"}
                        )
                        assert denied.status_code == 200
            eventually(receiver.posts, what="the delivery", within=30)
        [post] = receiver.posts()
    assert [(event["id"], event["event"]) for event in events] == [("1", "state"), ("3", "end")]
    assert events[0]["data"]["state"] == "awaiting_approval"
    assert events[0]["data"]["approval"]["state"] == "pending"
    assert events[1]["data"]["state"] == "rejected"
    assert json.loads(post.body)["state"] == "rejected"
