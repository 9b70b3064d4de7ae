"""Limits through the API: a request, a session (and its PATCH) or an MCP call may lower the
server's limits, never raise them; `/v1/info` says what is in force; records keep what a run
had. And the files the server writes are private."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.test_mcp import call, structured, text_of
from tests.conftest import AGENT, LiveServer, make_settings, serve
from tests.databases import Databases, ServerDatabase

SERVER_LIMITS = {
    "memory_mb": 2048,
    "processes": 100,
    "cpu_seconds": 600,
    "file_size_mb": 1024,
    "open_files": 4096,
}


@pytest.fixture(scope="module")
def limited(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[LiveServer]:
    settings = make_settings(
        tmp_path_factory.mktemp("limited"),
        module_databases.new(),
        **{f"limit_{name}": value for name, value in SERVER_LIMITS.items()},
    )
    with serve(settings) as live:
        yield live


@pytest.fixture
def client(limited: LiveServer) -> Iterator[httpx.Client]:
    with limited.client(AGENT) as client:
        yield client


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_info_reports_the_backend_and_the_limits_in_force(client: httpx.Client) -> None:
    info = client.get("/v1/info").json()
    assert info["confinement"] in ("cgroup2", "cgroup1", "rlimit")
    assert info["execution_limits"] == SERVER_LIMITS


def test_a_run_records_the_server_limits_and_the_backend(client: httpx.Client) -> None:
    result = client.post("/v1/executions", json={"command": "true"}).json()
    assert result["limits"] == SERVER_LIMITS
    assert result["confinement"] == client.get("/v1/info").json()["confinement"]
    again = client.get(f"/v1/executions/{result['id']}").json()
    assert again["limits"] == SERVER_LIMITS


def test_a_request_may_lower_a_limit(client: httpx.Client) -> None:
    result = client.post(
        "/v1/executions", json={"command": "ulimit -n", "limits": {"open_files": 256}}
    ).json()
    assert result["output"] == "256\n"
    assert result["limits"] == {**SERVER_LIMITS, "open_files": 256}


def test_a_pty_run_is_confined_too(client: httpx.Client) -> None:
    result = client.post(
        "/v1/executions",
        json={"command": "ulimit -n", "pty": True, "limits": {"open_files": 128}},
    ).json()
    assert result["state"] == "completed"
    assert result["output"].strip() == "128"


@pytest.mark.parametrize("name", sorted(SERVER_LIMITS))
def test_a_limit_above_the_server_is_refused_and_nothing_runs(
    client: httpx.Client, name: str
) -> None:
    asked = SERVER_LIMITS[name] + 1
    before = client.get("/v1/executions", params={"limit": 1}).json()["data"]
    response = client.post("/v1/executions", json={"command": "echo ran", "limits": {name: asked}})
    assert response.status_code == 422
    message = response.json()["error"]["message"]
    assert message == (
        f"limits.{name} of {asked} is above the server's limit of {SERVER_LIMITS[name]}"
    )
    after = client.get("/v1/executions", params={"limit": 1}).json()["data"]
    assert [row["id"] for row in after] == [row["id"] for row in before]


@pytest.mark.parametrize("limits", [{"memory_mb": 0}, {"processes": -1}, {"swap_mb": 1}])
def test_a_malformed_limit_is_a_422(client: httpx.Client, limits: dict[str, Any]) -> None:
    response = client.post("/v1/executions", json={"command": "true", "limits": limits})
    assert response.status_code == 422


@pytest.mark.settings(limit_memory_mb=0, limit_processes=0, limit_open_files=0)
@pytest.mark.parametrize(
    ("limits", "pty"),
    [
        ({"cpu_seconds": 10**30}, True),  # raised out of the PTY spawn: a 500
        ({"memory_mb": 2**50}, False),  # wrapped to a tiny limit: the run was killed
        ({"file_size_mb": 10**30}, False),  # `ulimit` refused it: a `failed` record
        ({"processes": 10**7}, False),
        ({"open_files": 2**31}, False),
    ],
)
def test_a_limit_no_backend_can_hold_is_a_422_on_a_server_without_limits(
    fresh_server: LiveServer, limits: dict[str, int], pty: bool
) -> None:
    with fresh_server.client(AGENT) as client:
        response = client.post(
            "/v1/executions", json={"command": "echo ran", "pty": pty, "limits": limits}
        )
        assert response.status_code == 422, response.text
        [problem] = response.json()["detail"]
        assert (problem["type"], problem["loc"]) == ("less_than_equal", ["body", "limits", *limits])
        session = client.post("/v1/sessions", json={"limits": limits})
        assert session.status_code == 422, session.text
        assert client.get("/v1/executions").json()["data"] == []
        assert client.get("/v1/sessions").json()["data"] == []


def test_a_session_carries_limits_into_its_calls_and_a_call_may_lower_them(
    client: httpx.Client,
) -> None:
    session = client.post("/v1/sessions", json={"limits": {"open_files": 512}}).json()
    assert session["limits"] == {"open_files": 512}
    run = client.post(
        "/v1/executions", json={"command": "ulimit -n", "session": session["id"]}
    ).json()
    assert run["output"] == "512\n"
    lowered = client.post(
        "/v1/executions",
        json={"command": "ulimit -n", "session": session["id"], "limits": {"open_files": 300}},
    ).json()
    assert lowered["output"] == "300\n"
    patched = client.patch(f"/v1/sessions/{session['id']}", json={"limits": {"processes": 50}})
    assert patched.json()["limits"] == {"processes": 50}
    run = client.post(
        "/v1/executions", json={"command": "ulimit -n", "session": session["id"]}
    ).json()
    assert run["limits"]["processes"] == 50
    assert run["limits"]["open_files"] == SERVER_LIMITS["open_files"]


def test_a_session_above_the_server_limits_is_refused(client: httpx.Client) -> None:
    response = client.post("/v1/sessions", json={"limits": {"processes": 101}})
    assert response.status_code == 422
    session = client.post("/v1/sessions", json={}).json()
    response = client.patch(f"/v1/sessions/{session['id']}", json={"limits": {"memory_mb": 4096}})
    assert response.status_code == 422
    assert client.get(f"/v1/sessions/{session['id']}").json()["limits"] == {}


@pytest.mark.anyio
async def test_mcp_bash_takes_limits_and_refuses_raising_them(limited: LiveServer) -> None:
    result = await call(limited, "bash", {"command": "ulimit -n", "limits": {"open_files": 200}})
    assert text_of(result).startswith("200\n")
    assert structured(result)["state"] == "completed"
    refused = await call(limited, "bash", {"command": "true", "limits": {"processes": 1000}})
    assert refused.is_error is True
    assert "above the server's limit of 100" in text_of(refused)


@pytest.mark.sqlite_only("the SQLite file's mode; on PostgreSQL the data dir holds only logs")
def test_the_data_dir_database_and_logs_are_private(
    tmp_path: Path, database: ServerDatabase
) -> None:
    settings = make_settings(tmp_path, database)
    with serve(settings) as live, live.client(AGENT) as client:
        result = client.post("/v1/executions", json={"command": "echo secret"}).json()
        data_dir = live.data_dir
        modes = {
            path.relative_to(data_dir).as_posix(): stat.S_IMODE(path.stat().st_mode)
            for path in data_dir.rglob("*")
        }
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    assert modes["shellgate.db"] == 0o600
    assert modes.get("shellgate.db-wal", 0o600) == 0o600
    shard = f"artifacts/{result['id'][-2:]}"
    assert modes[shard] == 0o700
    assert modes[f"{shard}/{result['id']}.log"] == 0o600
    assert modes[f"{shard}/{result['id']}.done"] == 0o600
    files = {name: mode for name, mode in modes.items() if (data_dir / name).is_file()}
    assert all(mode & 0o077 == 0 for mode in files.values()), files
