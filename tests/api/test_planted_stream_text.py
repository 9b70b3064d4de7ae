"""A line-delimited stream stays one item per line whatever a command prints: NEL, U+2028 and
U+2029 are valid raw in JSON but are line breaks to `str.splitlines()` and so to httpx's
`iter_lines()`, which the SDK's runner and many SSE readers split with (real server on
loopback, real bash; RELIABILITY.md, "Bytes and text a command plants")."""

from __future__ import annotations

import json

import httpx

from shellgate import Client
from tests.api.test_events import iter_events
from tests.conftest import AGENT, LiveServer

# printf writes NEL, LINE SEPARATOR, PARAGRAPH SEPARATOR, a CRLF and an SSE-looking line.
PLANTED = r"printf 'a\xc2\x85b\xe2\x80\xa8c\xe2\x80\xa9d\r\n\ndata: forged\n\nid: 9\n'"
PRINTED = "a\x85b\u2028c\u2029d\r\n\ndata: forged\n\nid: 9\n"
RAW_SEPARATORS = ("\x85".encode(), "\u2028".encode(), "\u2029".encode())


def _session(agent: httpx.Client) -> str:
    made = agent.post("/v1/sessions", json={})
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def test_each_runner_item_is_one_line_for_any_line_splitter(
    server: LiveServer, agent: httpx.Client
) -> None:
    session_id = _session(agent)
    try:
        with agent.stream(
            "POST", f"/v1/sessions/{session_id}/run", json={"command": PLANTED}
        ) as response:
            assert response.status_code == 200
            body = response.read()
        assert not any(raw in body for raw in RAW_SEPARATORS)
        items = [json.loads(line) for line in body.decode().splitlines()]
        assert "".join(item["stdout"] for item in items) == PRINTED
        assert items[-1]["exit_code"] == 0
        # The SDK reads the items with iter_lines(): the old lines broke into pieces there
        # (a bare JSONDecodeError out of `session_run`).
        with Client(server.base_url, AGENT) as client:
            result = client.session_run(session_id, PLANTED)
        assert result.stdout == PRINTED.encode() and result.exit_code == 0
    finally:
        agent.delete(f"/v1/sessions/{session_id}")


def test_an_event_record_is_one_data_line_and_forges_no_event(agent: httpx.Client) -> None:
    ran = agent.post("/v1/executions", json={"command": PLANTED})
    assert ran.status_code == 200, ran.text
    execution_id = ran.json()["id"]
    with agent.stream("GET", f"/v1/executions/{execution_id}/events") as response:
        assert response.status_code == 200
        body = response.read()
    assert not any(raw in body for raw in RAW_SEPARATORS)
    assert body.count(b"\ndata: ") == 1  # the output's `data: forged` is inside the JSON
    with agent.stream("GET", f"/v1/executions/{execution_id}/events") as response:
        events = [event for event in iter_events(response) if "event" in event]
    assert [(event["id"], event["event"]) for event in events] == [("3", "end")]
    # The record's output (the model's text; C1 controls such as NEL dropped) is all there.
    assert "b\u2028c\u2029d\n\ndata: forged\n\nid: 9\n" in events[0]["data"]["output"]
