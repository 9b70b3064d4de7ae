"""The hot reads (`app/api/hot_routes.py`) answer exactly as FastAPI's routes do.

Each request is sent twice to one server: once through the lean layer, once with it stepped
aside (a dependency override present, which the layer leaves to FastAPI, since only FastAPI
applies overrides). Bodies, statuses and headers must match; a spy on the layer counts which
path answered, so a test cannot pass by both going the same way."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from app.api.hot_routes import LeanHotRoutes
from app.main import create_app
from app.server.http_server import server_options
from tests.conftest import AGENT, AGENT2, LiveServer, free_port, make_settings
from tests.databases import ServerDatabase
from tests.waiting import eventually

COMPARED_HEADERS = ("content-type", "x-total-bytes", "x-complete", "x-next-offset", "x-offset")


def _general_path_marker() -> None:
    """A dependency override that is never used: its presence alone sends requests to FastAPI."""


class Served:
    def __init__(self, live: LiveServer, app: FastAPI, answered: list[str]) -> None:
        self.live = live
        self.app = app
        self.answered = answered

    def both_ways(self, client: httpx.Client, method: str, url: str, **kw: Any) -> list[Any]:
        """The request through the lean layer, then through FastAPI; asserts which answered."""
        responses = []
        for lean in (True, False):
            if lean:
                self.app.dependency_overrides.clear()
            else:
                self.app.dependency_overrides[_general_path_marker] = _general_path_marker
            self.answered.clear()
            responses.append(client.request(method, url, **kw))
            assert bool(self.answered) is lean, (url, lean, self.answered)
        self.app.dependency_overrides.clear()
        return responses


@pytest.fixture
def served(
    tmp_path: Path, database: ServerDatabase, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Served]:
    answered: list[str] = []
    original = LeanHotRoutes._answer

    async def spied(self: LeanHotRoutes, route: Any, *args: Any, **kwargs: Any) -> None:
        answered.append(route.path)
        await original(self, route, *args, **kwargs)

    monkeypatch.setattr(LeanHotRoutes, "_answer", spied)
    settings = make_settings(tmp_path, database, auto_background_ms=30000)
    app = create_app(settings)
    config = uvicorn.Config(
        app, host="127.0.0.1", port=free_port(), log_level="warning", **server_options(settings)
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    eventually(
        lambda: server.started or not thread.is_alive(), what="the server's start", within=30
    )
    assert server.started
    try:
        live = LiveServer(f"http://127.0.0.1:{config.port}", settings, settings.data_dir)
        yield Served(live, app, answered)
    finally:
        server.should_exit = True
        thread.join(30)


def _same(lean: httpx.Response, general: httpx.Response) -> None:
    assert lean.status_code == general.status_code, (lean.text, general.text)
    assert lean.content == general.content
    for name in COMPARED_HEADERS:
        assert lean.headers.get(name) == general.headers.get(name), name
    assert lean.headers["x-request-id"] and general.headers["x-request-id"]


def test_reads_and_health_answer_byte_for_byte_as_fastapi(served: Served) -> None:
    with served.live.client(AGENT) as client:
        record = client.post("/v1/executions", json={"command": "printf 'one\\ntwo\\n'"}).json()
        assert record["exit_code"] == 0
        execution = f"/v1/executions/{record['id']}"
        for url in (
            execution,
            f"{execution}?wait=1",
            f"{execution}?wait=0.25",
            f"{execution}/output",
            f"{execution}/output?offset=4",
            f"{execution}/output?limit=3&offset=1",
            f"{execution}/output?offset=999",
            "/healthz",
        ):
            lean, general = served.both_ways(client, "GET", url)
            assert lean.status_code == 200, lean.text
            _same(lean, general)
        lean, _ = served.both_ways(client, "GET", f"{execution}/output?offset=4")
        assert lean.content == b"two\n" and lean.headers["x-complete"] == "true"


def test_refusals_on_the_hot_routes_keep_their_shape(served: Served) -> None:
    with served.live.client(AGENT) as agent, served.live.client(AGENT2) as other:
        record = agent.post("/v1/executions", json={"command": "echo hi"}).json()
        execution = f"/v1/executions/{record['id']}"
        # Answered by the lean layer: the domain errors, in the app's envelope.
        with served.live.client(None) as anonymous:
            for method, url, kw in (
                ("GET", execution, {}),
                ("GET", f"{execution}/output", {}),
            ):
                lean, general = served.both_ways(anonymous, method, url, **kw)
                assert lean.status_code == 401
                assert lean.headers["www-authenticate"] == "Bearer"
                assert lean.json()["error"]["code"] == "unauthenticated"
                assert lean.json()["error"]["message"] == general.json()["error"]["message"]
        for url in (execution, f"{execution}/output", "/v1/executions/ex_nosuch000000"):
            lean, general = served.both_ways(other, "GET", url)
            assert lean.status_code == general.status_code == 404
            assert lean.json()["error"]["code"] == general.json()["error"]["code"] == "not_found"
        # Left to FastAPI: what does not validate, or not in the plain form the layer reads.
        served.app.dependency_overrides.clear()
        for method, url, kw in (
            ("GET", f"{execution}?wait=601", {}),
            ("GET", f"{execution}?wait=soon", {}),
            ("GET", f"{execution}/output?limit=0", {}),
            ("GET", f"{execution}/output?offset=-1", {}),
        ):
            served.answered.clear()
            response = agent.request(method, url, **kw)
            assert response.status_code == 422, (url, kw, response.text)
            assert "detail" in response.json()
            assert served.answered == []


def test_query_forms_the_layer_passes_on_still_work(served: Served) -> None:
    with served.live.client(AGENT) as client:
        record = client.post("/v1/executions", json={"command": "echo hi"}).json()
        execution = f"/v1/executions/{record['id']}"
        for url in (f"{execution}?wait=1e0", f"{execution}?wait=1&unknown=2"):
            served.answered.clear()
            response = client.get(url)
            assert response.status_code == 200 and response.json()["id"] == record["id"]
            assert served.answered == []


def test_a_submit_is_always_fastapis(served: Served) -> None:
    """The layer measured no worthwhile saving on a submit (bench/PROFILE.md): every submit,
    valid or not, whole or in chunks, is FastAPI's to validate and answer."""
    with served.live.client(AGENT) as client:
        served.answered.clear()
        whole = client.post("/v1/executions", json={"command": "echo whole"})
        chunked = client.post(
            "/v1/executions",
            content=iter([b'{"command": ', b'"echo chunked"', b"}"]),
            headers={"Content-Type": "application/json"},
        )
        refused = client.post("/v1/executions", json={"command": "echo x", "timeout": "soon"})
    assert whole.json()["output"] == "whole\n"
    assert chunked.json()["output"] == "chunked\n"
    assert refused.status_code == 422 and "detail" in refused.json()
    assert served.answered == []
