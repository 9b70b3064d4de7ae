"""OpenTelemetry tracing through the in-memory exporter: a server span per request naming the
execution, with child spans for the policy, an approval wait, the spawn and the run; and
nothing of OpenTelemetry imported when tracing is off."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from app.observability.logs import JsonFormatter, RequestIdFilter
from app.observability.tracing import EXECUTION_ID_ATTRIBUTE, Tracing
from tests.conftest import AGENT, APPROVER, LiveServer, make_settings, serve
from tests.databases import Databases
from tests.waiting import eventually

PROMPTED_POLICY = {
    "default": "allow",
    "critical": "prompt",
    "rules": [{"match": "echo ask-*", "approval": "prompt"}],
    "interceptor": {"enabled": False, "rules": None},
}


@pytest.fixture(scope="module")
def exporter(module_databases: Databases) -> InMemorySpanExporter:
    """One per database's server: a server's stop shuts its tracer provider down, and with it
    the exporter, which then drops every span (the next database's server got none of its
    own when one exporter served both in one process)."""
    return InMemorySpanExporter()


@pytest.fixture(scope="module")
def traced(
    tmp_path_factory: pytest.TempPathFactory,
    exporter: InMemorySpanExporter,
    module_databases: Databases,
) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("traced")
    policy = tmp / "policy.json"
    policy.write_text(json.dumps(PROMPTED_POLICY))
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with serve(
        make_settings(tmp, module_databases.new(), policy_file=policy), tracing=Tracing(provider)
    ) as live:
        yield live


def request_spans(
    exporter: InMemorySpanExporter, execution_id: str, expected: int = 1
) -> list[ReadableSpan]:
    """The server spans of requests that named this execution. A request's span ends after
    its response went out, so the test may see the response first: wait for them, bounded."""
    deadline = time.monotonic() + 10
    while True:
        spans = [
            span
            for span in exporter.get_finished_spans()
            if span.kind is SpanKind.SERVER
            and (span.attributes or {}).get(EXECUTION_ID_ATTRIBUTE) == execution_id
        ]
        if len(spans) >= expected or time.monotonic() > deadline:
            return spans
        time.sleep(0.02)  # the exporter offers no event to await


def children(exporter: InMemorySpanExporter, parent: ReadableSpan) -> dict[str, ReadableSpan]:
    assert parent.context is not None
    return {
        span.name: span
        for span in exporter.get_finished_spans()
        if span.parent is not None and span.parent.span_id == parent.context.span_id
    }


def test_a_request_span_names_the_execution_with_policy_spawn_and_run_children(
    traced: LiveServer, exporter: InMemorySpanExporter
) -> None:
    with traced.client(AGENT) as agent:
        body = agent.post("/v1/executions", json={"command": "echo traced"}).json()
    [request] = request_spans(exporter, body["id"])
    assert request.name == "POST /v1/executions"
    spans = children(exporter, request)
    assert {"policy", "spawn", "run"} <= set(spans)
    run = spans["run"]
    assert (run.attributes or {})["shellgate.state"] == "completed"
    assert (run.attributes or {})["shellgate.exit_code"] == 0
    assert run.end_time is not None and run.start_time is not None
    assert run.end_time - run.start_time > 0


def test_log_lines_of_a_traced_request_carry_its_trace_id(
    traced: LiveServer, exporter: InMemorySpanExporter
) -> None:
    lines = io.StringIO()
    handler = logging.StreamHandler(lines)
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(JsonFormatter())
    lifecycle = logging.getLogger("shellgate.lifecycle")
    lifecycle.addHandler(handler)
    level = lifecycle.level
    lifecycle.setLevel(logging.INFO)
    try:
        with traced.client(AGENT) as agent:
            body = agent.post("/v1/executions", json={"command": "echo logged"}).json()
    finally:
        lifecycle.removeHandler(handler)
        lifecycle.setLevel(level)
    [request] = request_spans(exporter, body["id"])
    assert request.context is not None
    trace_id = f"{request.context.trace_id:032x}"
    events = [json.loads(line) for line in lines.getvalue().splitlines()]
    mine = [event for event in events if event["execution_id"] == body["id"]]
    assert {event["event"] for event in mine} >= {"submitted", "started", "finished"}
    assert {event["trace_id"] for event in mine} == {trace_id}


def test_an_approval_wait_is_a_child_span(
    traced: LiveServer, exporter: InMemorySpanExporter
) -> None:
    with traced.client(AGENT) as agent, traced.client(APPROVER) as approver:

        def approve_when_pending() -> None:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                pending = approver.get("/v1/approvals", params={"state": "pending"}).json()
                if pending["data"]:
                    approver.post(f"/v1/approvals/{pending['data'][0]['id']}/approve", json={})
                    return
                time.sleep(0.05)  # polling the list: the waiting call holds its request

        with ThreadPoolExecutor(1) as pool:
            decided = pool.submit(approve_when_pending)
            body = agent.post(
                "/v1/executions", json={"command": "echo ask-me", "approval_wait": 20}
            ).json()
            decided.result(30)
    assert body["state"] == "completed"
    (submit,) = [s for s in request_spans(exporter, body["id"]) if s.name == "POST /v1/executions"]
    assert {"policy", "approval_wait"} <= set(children(exporter, submit))

    # The approver's request started the command: its span holds the spawn and the run. Found by
    # its spawn, not by the execution id the launch names on it: on a loaded machine the
    # approve request's span may end before that (CI saw it once), and an ended span keeps no
    # attribute set after.
    def approver_span() -> ReadableSpan | None:
        for span in exporter.get_finished_spans():
            spawned = children(exporter, span).get("spawn") if span.context else None
            if (
                spawned is not None
                and (spawned.attributes or {}).get(EXECUTION_ID_ATTRIBUTE) == body["id"]
            ):
                return span
        return None

    approve = eventually(approver_span, what="the spawn's span, under a request's")
    assert approve.name == "POST /v1/approvals/{approval_id}/approve"
    assert approve.kind is SpanKind.SERVER
    assert "run" in children(exporter, approve)


def test_no_opentelemetry_sdk_is_loaded_when_tracing_is_off(tmp_path: Path) -> None:
    # FastAPI itself imports the OpenTelemetry *API* when it is installed; the SDK, the
    # exporter and the instrumentation are ours to load, and only when tracing is on.
    program = (
        "import sys\n"
        "from pathlib import Path\n"
        "from app.core.config import Settings\n"
        "from app.main import create_app\n"
        f"create_app(Settings(_env_file=None, data_dir=Path({str(tmp_path)!r})))\n"
        "ours = ('opentelemetry.sdk', 'opentelemetry.exporter', 'opentelemetry.instrumentation')\n"
        "loaded = sorted(name for name in sys.modules if name.startswith(ours))\n"
        "print(loaded)\n"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    result = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
