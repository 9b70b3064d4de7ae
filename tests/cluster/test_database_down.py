"""PostgreSQL unreachable under a replica with cluster settings (a loopback proxy in front of a
database of the test's own, cut; the machine's server keeps running): every route answers
503 `database_unavailable` with `Retry-After` or a plain 4xx, WebSockets close with 1013, never
a 500; the log carries one traceback for the outage, not one per request."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import make_url
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.cluster.replicas import CLUSTER_SECRET, fresh_database
from tests.conftest import ADMIN, AGENT, LiveServer, make_settings, serve
from tests.databases import ServerDatabase
from tests.faults.cuttable_proxy import CuttableProxy
from tests.waiting import eventually

pytestmark = pytest.mark.postgres

NODE_TIMEOUT = 3
HEARTBEAT_SECONDS = NODE_TIMEOUT / 3

OPENAPI_ROUTES = (
    ("GET", "/v1/approvals", None),
    ("GET", "/v1/approvals/{approval}", None),
    ("POST", "/v1/approvals/{approval}/approve", {}),
    ("POST", "/v1/approvals/{approval}/deny", {}),
    ("GET", "/v1/executions", None),
    ("POST", "/v1/executions", {"command": "echo during > during-ran"}),
    ("POST", "/v1/executions", {"command": "echo during > during-ran", "session": "{session}"}),
    ("GET", "/v1/executions/{job}", None),
    ("GET", "/v1/executions/{job}?wait=5", None),
    ("GET", "/v1/executions/{done}?wait=5", None),
    ("POST", "/v1/executions/{job}/cancel", None),
    ("GET", "/v1/executions/{job}/events", None),
    ("POST", "/v1/executions/{job}/input", {"data": "x"}),
    ("GET", "/v1/executions/{job}/output", None),
    ("GET", "/v1/executions/{done}/output", None),
    ("POST", "/v1/executions/{job}/resize", {"rows": 10, "cols": 40}),
    ("POST", "/v1/executions/{job}/signal", {"signal": "SIGINT"}),
    ("GET", "/v1/files?path=seen.txt", None),
    ("PUT", "/v1/files?path=during-put.txt", None),
    ("GET", "/v1/files/check?path=seen.txt&op=read", None),
    ("GET", "/v1/files/operations", None),
    ("GET", "/v1/files/stat?path=seen.txt", None),
    ("GET", "/v1/info", None),
    ("GET", "/v1/nodes", None),
    ("GET", "/v1/policy", None),
    ("POST", "/v1/policy/evaluate", {"command": "ls"}),
    ("GET", "/v1/policy/versions", None),
    ("GET", "/v1/sessions", None),
    ("POST", "/v1/sessions", {}),
    ("GET", "/v1/sessions/{session}", None),
    ("PATCH", "/v1/sessions/{session}", {"timeout_ms": 60000}),
    ("POST", "/v1/sessions/{session}/run", {"command": "echo during > during-ran"}),
    ("GET", "/v1/sessions/{session}/tool", None),
    ("DELETE", "/v1/sessions/{session}", None),
    ("GET", "/v1/tool", None),
    ("POST", "/v1/ws-tickets", {}),
    ("GET", "/readyz", None),
)


@pytest.fixture
def replica_behind_proxy(tmp_path: Path) -> Iterator[tuple[LiveServer, CuttableProxy]]:
    """A replica with cluster settings on a database of its own, reached through a proxy."""
    with fresh_database() as direct:
        url = make_url(direct)
        proxy = CuttableProxy((url.host or "127.0.0.1", url.port or 5432))
        proxy.start()
        proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
        settings = make_settings(
            tmp_path,
            ServerDatabase("postgres", proxied),
            node_id="node-a",
            node_url="http://127.0.0.1:9",  # never called: every record here is its own
            cluster_secret=CLUSTER_SECRET,
            node_timeout=NODE_TIMEOUT,
        )
        try:
            with serve(settings) as live:
                yield live, proxy
        finally:
            proxy.cut()


async def close_code(url: str) -> int | None:
    try:
        async with connect(url, additional_headers={"Authorization": f"Bearer {AGENT}"}) as ws:
            await asyncio.wait_for(ws.recv(), 15)
            await asyncio.wait_for(ws.recv(), 15)
    except ConnectionClosed as closed:
        return closed.rcvd.code if closed.rcvd else None
    return None


def sweep(client: httpx.Client, ids: dict[str, str], answers: dict[str, httpx.Response]) -> None:
    for method, template, body in OPENAPI_ROUTES:
        path = template.format(**ids)
        if isinstance(body, dict) and body.get("session") == "{session}":
            body = {**body, "session": ids["session"]}
        answer = client.request(method, path, json=body)
        answers[f"{method} {path}"] = answer
        assert answer.status_code != 500, (method, path, answer.text)
        if answer.status_code >= 500:
            assert answer.status_code == 503, (method, path, answer.text)
            assert int(answer.headers["Retry-After"]) > 0, (method, path)
            assert answer.json()["error"]["code"] == "database_unavailable", answer.text


def tracebacks(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.exc_info and record.exc_info[0]]


def test_database_down_under_a_cluster_replica_is_503_or_1013_never_500(
    replica_behind_proxy: tuple[LiveServer, CuttableProxy], caplog: pytest.LogCaptureFixture
) -> None:
    server, proxy = replica_behind_proxy
    (server.settings.workspace / "seen.txt").write_text("seen\n")
    with server.client(ADMIN) as admin:
        done = admin.post("/v1/executions", json={"command": "echo before"})
        assert done.status_code == 200, done.text
        job = admin.post(
            "/v1/executions",
            json={"command": "while [ ! -e go ]; do sleep 0.05; done", "async": True},
        )
        assert job.status_code == 202, job.text
        session = admin.post("/v1/sessions", json={})
        assert session.status_code == 201, session.text
        ids = {
            "job": job.json()["id"],
            "done": done.json()["id"],
            "session": session.json()["id"],
            "approval": "ap_absent",
        }
        ws_base = server.base_url.replace("http://", "ws://")

        proxy.cut()
        before = len(tracebacks(caplog))
        answers: dict[str, httpx.Response] = {}
        # Sweeps for three heartbeats at least, so that the background loops (heartbeat,
        # approvals poll, job-slot release) fail too, several times each.
        outage_started = time.monotonic()
        sweeps = 0
        while sweeps < 2 or time.monotonic() - outage_started < 3 * HEARTBEAT_SECONDS:
            sweeps += 1
            assert sweeps <= 50
            sweep(admin, ids, answers)
        for needs_the_database in (
            f"GET /v1/executions/{ids['job']}/output",
            f"GET /v1/executions/{ids['job']}?wait=5",
            f"POST /v1/executions/{ids['job']}/cancel",
            "GET /v1/sessions",
            f"GET /v1/sessions/{ids['session']}",
        ):
            assert answers[needs_the_database].status_code == 503, needs_the_database
        for stream in (f"/v1/executions/{ids['job']}/stream", "/v1/approvals/stream"):
            assert asyncio.run(close_code(ws_base + stream)) == 1013, stream
        assert not (server.settings.workspace / "during-ran").exists()
        assert not (server.settings.workspace / "during-put.txt").exists()
        assert len(tracebacks(caplog)) - before <= 1, [
            record.getMessage() for record in tracebacks(caplog)[before:]
        ]

        proxy.start()
        (server.settings.workspace / "go").touch()
        eventually(
            lambda: admin.get("/readyz").status_code == 200,
            what="ready once the database is back",
            within=20,
        )
        ended = admin.get(f"/v1/executions/{ids['job']}", params={"wait": 30}).json()
        assert ended["state"] == "completed", ended
        assert admin.get(f"/v1/sessions/{ids['session']}").status_code == 200
        back = [
            record.getMessage()
            for record in caplog.records
            if record.getMessage().startswith("database answers again after")
        ]
        assert len(back) == 1, back
        assert len(tracebacks(caplog)) - before <= 1
