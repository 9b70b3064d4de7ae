"""`GET /v1/executions/{id}/search` (docs/api.md#searching-the-output): the whole log on disk
is searched, not a client's scrollback: `line 5:` of a 30,000-line log is found, with the byte
offset `/output` reads it at and its line number; case folding, the limit, a log over the cap,
a running execution, and who may search."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from shellgate import Client
from tests.conftest import AGENT, AGENT2, LiveServer, make_settings, serve
from tests.databases import Databases, ServerDatabase
from tests.waiting import eventually


@pytest.fixture(scope="module")
def live(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[LiveServer]:
    settings = make_settings(tmp_path_factory.mktemp("search"), module_databases.new())
    with serve(settings) as server:
        yield server


@pytest.fixture
def alice(live: LiveServer) -> Iterator[httpx.Client]:
    with live.client(AGENT) as client:
        yield client


def ran(client: httpx.Client, command: str) -> dict[str, Any]:
    response = client.post("/v1/executions", json={"command": command, "timeout": 120})
    assert response.status_code == 200, response.text
    record: dict[str, Any] = response.json()
    assert record["state"] == "completed", record
    return record


def search(client: httpx.Client, execution_id: str, **params: Any) -> dict[str, Any]:
    response = client.get(f"/v1/executions/{execution_id}/search", params=params)
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


def test_a_line_far_out_of_any_scrollback_is_found_with_its_offset_and_number(
    alice: httpx.Client,
) -> None:
    record = ran(alice, "seq -f 'line %g: ok' 1 30000")
    found = search(alice, record["id"], q="line 5:")
    assert found["matches"] == [{"offset": 44, "line": 5, "text": "line 5: ok"}]
    assert (found["truncated"], found["complete"], found["skipped"]) == (False, True, None)
    assert found["total_bytes"] == record["total_bytes"]
    at = alice.get(
        f"/v1/executions/{record['id']}/output", params={"offset": 44, "limit": 10}
    ).content
    assert at == b"line 5: ok"
    last = search(alice, record["id"], q="line 30000:")["matches"]
    assert [(m["line"], m["text"]) for m in last] == [(30000, "line 30000: ok")]


def test_case_folding_the_limit_and_terminal_escapes(alice: httpx.Client) -> None:
    record = ran(
        alice,
        "printf 'ERROR one\\nok\\n\\033[31merror\\033[0m two\\nError three\\n'",
    )
    assert search(alice, record["id"], q="error")["matches"] == [
        {"offset": 18, "line": 3, "text": "error two"}
    ]
    folded = search(alice, record["id"], q="error", ignore_case=True)
    assert [m["line"] for m in folded["matches"]] == [1, 3, 4]
    first_two = search(alice, record["id"], q="error", ignore_case=True, limit=2)
    assert [m["line"] for m in first_two["matches"]] == [1, 3]
    assert first_two["truncated"] is True
    assert search(alice, record["id"], q="absent")["matches"] == []


def test_a_running_execution_is_searched_as_far_as_it_has_written(
    alice: httpx.Client, live: LiveServer
) -> None:
    gate = live.settings.workspace / "search-gate"
    job = alice.post(
        "/v1/executions",
        json={
            "command": f"echo first-part; while [ ! -e {gate} ]; do sleep 0.05; done; echo later",
            "async": True,
        },
    ).json()
    found = eventually(
        lambda: (r := search(alice, job["id"], q="first-part"))["matches"] and r,
        what="the running job's first line",
        within=15,
    )
    assert found["complete"] is False
    assert search(alice, job["id"], q="later")["matches"] == []
    gate.touch()
    alice.get(f"/v1/executions/{job['id']}", params={"wait": 30})
    assert [m["text"] for m in search(alice, job["id"], q="later")["matches"]] == ["later"]


def test_bad_queries_and_other_owners_are_refused(alice: httpx.Client, live: LiveServer) -> None:
    record = ran(alice, "echo mine")
    for params in ({"q": ""}, {}, {"q": "x", "limit": 0}, {"q": "x" * 1001}):
        refused = alice.get(f"/v1/executions/{record['id']}/search", params=params)
        assert refused.status_code == 422, (params, refused.text)
    with live.client(AGENT2) as bob:
        assert (
            bob.get(f"/v1/executions/{record['id']}/search", params={"q": "mine"}).status_code
            == 404
        )
    assert alice.get("/v1/executions/ex_absent/search", params={"q": "x"}).status_code == 404


def test_a_log_over_the_cap_is_searched_around_its_evicted_middle(
    tmp_path: Path, database: ServerDatabase
) -> None:
    settings = make_settings(tmp_path, database, artifact_max_bytes=4096)
    with serve(settings) as server, server.client(AGENT) as alice:
        record = ran(alice, "seq -f 'row %g' 1 20000")
        head = search(alice, record["id"], q="row 3")["matches"][0]
        assert (head["line"], head["text"]) == (3, "row 3")
        found = search(alice, record["id"], q="row 19999")
        assert found["skipped"] is not None
        start, end = found["skipped"]
        assert 0 < start < end < record["total_bytes"]
        (tail,) = found["matches"]
        assert tail["text"] == "row 19999" and tail["line"] is None  # lines past it uncounted
        assert search(alice, record["id"], q="row 10000")["matches"] == []  # evicted


def test_the_sdk_searches_on_the_server(alice: httpx.Client, live: LiveServer) -> None:
    record = ran(alice, "seq -f 'entry %g' 1 5000")
    with Client(live.base_url, AGENT) as sdk:
        found = sdk.search_output(record["id"], "ENTRY 4999", ignore_case=True)
    assert [(m.line, m.text) for m in found.matches] == [(4999, "entry 4999")]
    assert found.complete and not found.truncated
