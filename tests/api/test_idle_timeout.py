"""`idle_timeout`: a command silent for N seconds is backgrounded (or cancelled) with the exact
notice and its output so far; output keeps the clock from firing."""

from __future__ import annotations

import time

import httpx
import pytest

NOTICE = "No output for {n}s; the command may be waiting for input or stuck."


def test_a_silent_command_is_backgrounded_with_the_notice_and_its_output(
    agent: httpx.Client,
) -> None:
    started = time.monotonic()
    response = agent.post(
        "/v1/executions", json={"command": "echo waiting-for-you; sleep 60", "idle_timeout": 1}
    )
    elapsed = time.monotonic() - started
    try:
        assert response.status_code == 202, response.text
        body = response.json()
        assert body["state"] == "running" and body["mode"] == "job"
        assert body["output"] == "waiting-for-you\n"
        assert NOTICE.format(n=1) in body["text"].splitlines()
        assert body["text"].startswith("waiting-for-you")
        assert body["text"].endswith(
            f"Backgrounded as job {body['id']}; result will be delivered automatically."
        )
        assert NOTICE.format(n=1) in body["notices"]
        # Well before the 30 s auto-background threshold.
        assert 0.9 <= elapsed < 20
    finally:
        agent.post(f"/v1/executions/{response.json()['id']}/cancel")
    final = agent.get(f"/v1/executions/{response.json()['id']}", params={"wait": 30}).json()
    assert final["state"] == "cancelled"
    assert NOTICE.format(n=1) in final["notices"]


def test_idle_cancel_ends_the_command_with_the_notice(agent: httpx.Client) -> None:
    response = agent.post(
        "/v1/executions",
        json={
            "command": "echo 'Password:'; sleep 60",
            "idle_timeout": 1.5,
            "idle_action": "cancel",
        },
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["state"] == "cancelled"
    assert body["output"] == "[Command cancelled]\nPassword:\n"
    assert NOTICE.format(n=1.5) in body["text"].splitlines()
    assert NOTICE.format(n=1.5) in body["notices"]
    assert body["wall_time_ms"] >= 1400


def test_output_resets_the_idle_clock(agent: httpx.Client) -> None:
    """Ten lines 0.3 s apart (3 s in all) under a 2 s idle timeout: the command is never silent
    for 2 s while it prints, so the answer carries every line; then it falls silent."""
    response = agent.post(
        "/v1/executions",
        json={
            "command": "for i in 1 2 3 4 5 6 7 8 9 10; do echo line$i; sleep 0.3; done; sleep 60",
            "idle_timeout": 2,
            "idle_action": "cancel",
        },
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["state"] == "cancelled"
    assert "line10" in body["output"]
    assert body["wall_time_ms"] >= 3000 + 2000 - 300


def test_a_command_that_ends_in_time_is_untouched(agent: httpx.Client) -> None:
    response = agent.post(
        "/v1/executions", json={"command": "sleep 0.2; echo done", "idle_timeout": 5}
    )
    assert response.status_code == 200
    body = response.json()
    assert body["state"] == "completed"
    assert "No output" not in body["text"]


@pytest.mark.parametrize(
    "fields",
    [{"idle_timeout": 0}, {"idle_timeout": -1}, {"idle_timeout": 4000}, {"idle_action": "kill"}],
)
def test_bad_idle_fields_are_422(agent: httpx.Client, fields: dict[str, object]) -> None:
    response = agent.post("/v1/executions", json={"command": "true", **fields})
    assert response.status_code == 422


def test_an_async_job_is_cancelled_when_idle(agent: httpx.Client) -> None:
    started = agent.post(
        "/v1/executions",
        json={
            "command": "echo hi; sleep 60",
            "async": True,
            "idle_timeout": 1,
            "idle_action": "cancel",
        },
    )
    assert started.status_code == 202
    final = agent.get(f"/v1/executions/{started.json()['id']}", params={"wait": 30}).json()
    assert final["state"] == "cancelled"
    assert NOTICE.format(n=1) in final["text"]
