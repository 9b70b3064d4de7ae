"""The database unreachable (a proxy in front of PostgreSQL, cut): readiness fails and calls
get 503 `database_unavailable` with Retry-After, never a 500; once the database is back the
same server works again, without a restart."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import make_url

from app.executions import lifecycle
from app.store.db import CONNECT_TIMEOUT_SECONDS
from tests.conftest import AGENT, LiveServer, make_settings, serve
from tests.databases import PostgresDatabases, ServerDatabase
from tests.faults.cuttable_proxy import CuttableProxy


@pytest.fixture
def behind_proxy(
    tmp_path: Path, postgres_databases: PostgresDatabases
) -> Iterator[tuple[LiveServer, CuttableProxy]]:
    """A server on a database of its own, reached through a proxy the test can cut."""
    with postgres_databases.database() as direct:
        assert direct.url is not None
        url = make_url(direct.url)
        proxy = CuttableProxy((url.host or "127.0.0.1", url.port or 5432))
        proxy.start()
        proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
        try:
            with serve(make_settings(tmp_path, ServerDatabase("postgres", proxied))) as live:
                yield live, proxy
        finally:
            proxy.cut()


def end_a_job_in_an_outage(
    server: LiveServer,
    proxy: CuttableProxy,
    client: httpx.Client,
    caplog: pytest.LogCaptureFixture,
) -> dict[str, Any]:
    """A job started, the database cut, then the job let end: once the server has tried (and
    failed) to record that end, the job's first record."""
    job: dict[str, Any] = client.post(
        "/v1/executions",
        json={"command": "while [ ! -e go ]; do sleep 0.05; done; echo ended", "async": True},
    ).json()
    proxy.cut()
    (server.settings.workspace / "go").touch()
    waiting = f"database unreachable: the end of {job['id']} waits for it"
    deadline = time.monotonic() + 15
    while not any(record.getMessage() == waiting for record in caplog.records):
        assert time.monotonic() < deadline, "the job's end was not attempted"
        time.sleep(0.05)
    return job


@pytest.mark.postgres
def test_an_unreachable_database_is_a_503_and_recovers_without_a_restart(
    behind_proxy: tuple[LiveServer, CuttableProxy], caplog: pytest.LogCaptureFixture
) -> None:
    server, proxy = behind_proxy
    with server.client(AGENT) as client:
        first = client.post("/v1/executions", json={"command": "echo before"})
        assert first.status_code == 200, first.text
        # A job whose end falls in the outage: its record must still be written, once the
        # database is back, without a restart.
        job = end_a_job_in_an_outage(server, proxy, client, caplog)
        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["error"]["code"] == "database_unavailable"
        for method, path, body in (
            ("POST", "/v1/executions", {"command": "echo during > during-ran"}),
            ("GET", f"/v1/executions/{first.json()['id']}", None),
            ("GET", "/v1/executions", None),
        ):
            refused = client.request(method, path, json=body)
            assert refused.status_code == 503, (path, refused.text)
            assert refused.json()["error"]["code"] == "database_unavailable"
            assert int(refused.headers["Retry-After"]) > 0
        assert not (server.settings.workspace / "during-ran").exists()

        proxy.start()
        deadline = time.monotonic() + 15
        while client.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, "not ready after the database returned"
            time.sleep(0.1)
        ended = client.get(f"/v1/executions/{job['id']}?wait=30").json()
        assert ended["state"] == "completed", ended
        assert ended["output"] == "ended\n"
        after = client.post("/v1/executions", json={"command": "echo after"})
        assert after.status_code == 200, after.text
        assert after.json()["output"] == "after\n"


@pytest.mark.postgres
def test_a_command_that_ended_in_a_long_outage_is_recorded_when_the_database_returns(
    behind_proxy: tuple[LiveServer, CuttableProxy],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """However long the outage, the end waits for the database: it used to be given up after
    `FINAL_WRITE_PATIENCE` (600 s), which left the record `running` until a restart. Tries
    here are 50 ms apart at most, so the outage below spans dozens of them; the patience the
    server once had is set far below it (`raising=False`: the name is gone)."""
    monkeypatch.setattr(lifecycle, "FINAL_WRITE_RETRY_CAP", 0.05)
    monkeypatch.setattr(lifecycle, "FINAL_WRITE_PATIENCE", 0.3, raising=False)
    server, proxy = behind_proxy
    with server.client(AGENT) as client:
        job = end_a_job_in_an_outage(server, proxy, client, caplog)
        time.sleep(3)
        assert not [r for r in caplog.records if "gave up" in r.getMessage()]
        proxy.start()
        ended = client.get(f"/v1/executions/{job['id']}?wait=30")
        deadline = time.monotonic() + 15
        while ended.status_code == 503:  # the pool's first connection after the outage
            assert time.monotonic() < deadline, "not answering after the database returned"
            time.sleep(0.1)
            ended = client.get(f"/v1/executions/{job['id']}?wait=30")
        assert (ended.json()["state"], ended.json()["output"]) == ("completed", "ended\n")


@pytest.mark.postgres
def test_a_database_that_never_answers_is_a_503_within_the_connect_timeout(
    behind_proxy: tuple[LiveServer, CuttableProxy],
) -> None:
    server, proxy = behind_proxy
    with server.client(AGENT) as client:
        assert client.post("/v1/executions", json={"command": "echo before"}).status_code == 200
        proxy.blackhole()
        started = time.monotonic()
        refused = client.post("/v1/executions", json={"command": "echo during > during-ran"})
        elapsed = time.monotonic() - started
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "database_unavailable"
        assert elapsed < CONNECT_TIMEOUT_SECONDS + 5
        assert not (server.settings.workspace / "during-ran").exists()
        proxy.cut()
        proxy.start()
        deadline = time.monotonic() + 15
        while client.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, "not ready after the database answered again"
            time.sleep(0.1)


@pytest.mark.postgres
def test_a_lone_server_on_postgresql_keeps_its_commands_through_a_long_outage(
    tmp_path: Path, postgres_databases: PostgresDatabases, caplog: pytest.LogCaptureFixture
) -> None:
    """Fencing (app/cluster/node.py) ends a replica's commands when it cannot heartbeat, for
    the others would take them for lost; a server that saw no other replica has nobody to take
    them over, so an outage longer than its node timeout must cost it nothing."""
    with postgres_databases.database() as direct:
        assert direct.url is not None
        url = make_url(direct.url)
        proxy = CuttableProxy((url.host or "127.0.0.1", url.port or 5432))
        proxy.start()
        proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
        settings = make_settings(tmp_path, ServerDatabase("postgres", proxied), node_timeout=2)
        try:
            with serve(settings) as server, server.client(AGENT) as client:
                job = client.post(
                    "/v1/executions",
                    json={
                        "command": "while [ ! -e go ]; do sleep 0.05; done; echo survived",
                        "async": True,
                    },
                ).json()
                proxy.cut()
                # An outage, not a wait for an event: longer than the node timeout (2 s) and
                # than `fence_after` (1 s here).
                time.sleep(3)
                proxy.start()
                deadline = time.monotonic() + 15
                while client.get("/readyz").status_code != 200:
                    assert time.monotonic() < deadline, "not ready after the database returned"
                    time.sleep(0.1)
                (server.settings.workspace / "go").touch()
                ended = client.get(f"/v1/executions/{job['id']}?wait=30").json()
                assert (ended["state"], ended["output"]) == ("completed", "survived\n"), ended
                assert not [r for r in caplog.records if "ending this replica's" in r.getMessage()]
        finally:
            proxy.cut()
