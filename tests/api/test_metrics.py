"""`/metrics` after real traffic: requests by route template and status, executions by state
with durations and output bytes, policy verdicts, approvals pending and their wait, WebSocket
viewers, process and build info."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.sync.client import connect

from app import __version__
from tests.conftest import ADMIN, AGENT, APPROVER, LiveServer, make_settings, serve
from tests.databases import Databases

PROMPTED_POLICY = {
    "default": "allow",
    "critical": "prompt",
    "rules": [{"match": "echo ask-*", "approval": "prompt"}],
    "interceptor": {"enabled": False, "rules": None},
}
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def gated(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("metrics")
    policy = tmp / "policy.json"
    policy.write_text(json.dumps(PROMPTED_POLICY))
    with serve(make_settings(tmp, module_databases.new(), policy_file=policy)) as live:
        yield live


def scrape(server: LiveServer) -> Samples:
    with server.client(ADMIN) as client:
        response = client.get("/metrics")
    assert response.status_code == 200
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def wait_for_sample(server: LiveServer, name: str, expected: float, **labels: str) -> Samples:
    deadline = time.monotonic() + 10
    while True:
        samples = scrape(server)
        if value(samples, name, **labels) == expected or time.monotonic() > deadline:
            return samples
        time.sleep(0.05)  # a gauge read at scrape time: nothing to await


def test_requests_are_counted_by_route_template_and_status(gated: LiveServer) -> None:
    before = scrape(gated)
    with gated.client(AGENT) as agent:
        assert agent.post("/v1/executions", json={"command": "echo hi"}).status_code == 200
        assert agent.get("/v1/executions/ex_absent000000000000").status_code == 404
    posted = {"method": "POST", "route": "/v1/executions", "status": "200"}
    missing = {"method": "GET", "route": "/v1/executions/{execution_id}", "status": "404"}
    count = "shellgate_http_request_seconds_count"
    # A request is observed once its response has gone out: wait for the last one, bounded.
    after = wait_for_sample(gated, count, value(before, count, **missing) + 1, **missing)
    for labels in (posted, missing):
        assert value(after, count, **labels) == value(before, count, **labels) + 1
    assert value(after, "shellgate_http_request_seconds_sum", **posted) > value(
        before, "shellgate_http_request_seconds_sum", **posted
    )
    # Raw paths (ids) never become labels.
    assert not any("ex_absent" in str(labels) for _, labels in after)


def test_mcp_docs_and_openapi_are_counted_under_their_own_path(gated: LiveServer) -> None:
    with gated.client(ADMIN) as admin:
        assert admin.get("/openapi.json").status_code == 200
        assert admin.get("/docs").status_code == 200
        admin.post("/mcp", json={})  # any answer: it is the label that is checked
        assert admin.get("/v1/no-such-route").status_code == 404
    count = "shellgate_http_request_seconds_count"
    samples = wait_for_sample(gated, count, 1, method="GET", route="/docs", status="200")
    routes = {dict(labels).get("route") for name, labels in samples if name == count}
    assert {"/openapi.json", "/docs", "/mcp", "<unmatched>"} <= routes


def test_executions_are_counted_by_state_with_duration_and_bytes(gated: LiveServer) -> None:
    before = scrape(gated)
    with gated.client(AGENT) as agent:
        assert (
            agent.post("/v1/executions", json={"command": "printf 12345"}).json()["exit_code"] == 0
        )
        assert agent.post("/v1/executions", json={"command": "exit 3"}).json()["state"] == "failed"
    after = scrape(gated)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("shellgate_executions_finished_total", state="completed") == 1
    assert moved("shellgate_executions_finished_total", state="failed") == 1
    assert moved("shellgate_execution_duration_seconds_count", state="completed") == 1
    assert moved("shellgate_execution_duration_seconds_sum", state="completed") > 0
    assert moved("shellgate_execution_output_bytes_count") == 2
    assert moved("shellgate_execution_output_bytes_sum") == 5
    assert moved("shellgate_executions_started_total", mode="foreground") == 2
    assert moved("shellgate_policy_verdicts_total", approval="allow") == 2


def test_pending_approvals_and_their_wait_are_measured(gated: LiveServer) -> None:
    before = scrape(gated)
    with gated.client(AGENT) as agent, gated.client(APPROVER) as approver:
        pending = agent.post("/v1/executions", json={"command": "echo ask-me", "async": True})
        assert pending.status_code == 202
        approval_id = pending.json()["approval"]["id"]
        during = scrape(gated)
        assert value(during, "shellgate_pending_approvals") == 1
        decided = approver.post(f"/v1/approvals/{approval_id}/approve", json={"reason": "ok"})
        assert decided.status_code == 200
    after = scrape(gated)
    assert value(after, "shellgate_pending_approvals") == 0
    assert (
        value(after, "shellgate_policy_verdicts_total", approval="prompt")
        == value(before, "shellgate_policy_verdicts_total", approval="prompt") + 1
    )
    waited = "shellgate_approval_wait_seconds_count"
    assert value(after, waited, state="approved") == value(before, waited, state="approved") + 1


def test_stream_viewers_are_a_live_gauge(gated: LiveServer) -> None:
    with gated.client(AGENT) as agent:
        job = agent.post("/v1/executions", json={"command": "sleep 30", "async": True}).json()
        url = f"{gated.ws_url}/v1/executions/{job['id']}/stream"
        try:
            with connect(url, additional_headers={"Authorization": f"Bearer {AGENT}"}) as ws:
                assert json.loads(ws.recv(10))["type"] == "state"
                watched = wait_for_sample(gated, "shellgate_stream_viewers", 1)
                assert value(watched, "shellgate_stream_viewers") == 1
        finally:
            agent.post(f"/v1/executions/{job['id']}/cancel")
    left = wait_for_sample(gated, "shellgate_stream_viewers", 0)
    assert value(left, "shellgate_stream_viewers") == 0


def test_process_and_build_info_are_exported(gated: LiveServer) -> None:
    samples = scrape(gated)
    assert value(samples, "process_resident_memory_bytes") > 0
    assert value(samples, "process_cpu_seconds_total") > 0
    build = [labels for name, labels in samples if name == "shellgate_build_info"]
    assert build and ("version", __version__) in build[0]


def test_a_held_long_poll_is_counted_while_it_waits(gated: LiveServer) -> None:
    name = "shellgate_waiting_calls"
    with gated.client(AGENT) as agent:
        job = agent.post("/v1/executions", json={"command": "sleep 30", "async": True}).json()

        def long_poll() -> httpx.Response:
            with gated.client(AGENT) as poller:
                return poller.get(f"/v1/executions/{job['id']}?wait=30")

        with ThreadPoolExecutor(1) as pool:
            held = pool.submit(long_poll)
            during = wait_for_sample(gated, name, 1)
            assert value(during, name) == 1
            assert agent.post(f"/v1/executions/{job['id']}/cancel").status_code == 200
            assert held.result(timeout=30).json()["state"] == "cancelled"
    assert value(wait_for_sample(gated, name, 0), name) == 0
