"""Fixtures: a real uvicorn serving the real app on loopback, on a real database.

Every test that starts a server runs twice, once per database: the `database_kind` fixture is
parametrized "sqlite" and "postgres" (test ids end in `[sqlite]` / `[postgres]`; the postgres
half carries the `postgres` marker). Fixtures that start servers take a database of their own
scope — `database` (per test), `module_databases.new()`, `session_databases.new()` — and
pass it to `make_settings(tmp, database, ...)`. On PostgreSQL each is a fresh database copied from a
template migrated once per session (tests/databases.py), dropped afterwards even when the test
fails. A multi-replica test puts its servers on one `database` by passing the same one to each
`make_settings`.

Tests about SQLite itself (its file, its disk) carry `@pytest.mark.sqlite_only("why")` and run on
SQLite alone. PostgreSQL unreachable: locally the postgres half is skipped with the reason; with
CI=true the run stops before any test, so that half can never be skipped silently."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from sqlalchemy import Engine, create_engine

from app.core.config import Settings
from app.main import create_app
from app.observability.tracing import Tracing
from app.server.http_server import server_options
from tests.cgroup_leftovers import remove_test_servers_cgroups
from tests.databases import (
    Databases,
    PostgresDatabases,
    ServerDatabase,
    postgres_unreachable_reason,
)
from tests.waiting import eventually

AGENT = "agent-secret-0123456789"
AGENT2 = "agent2-secret-0123456789"
APPROVER = "approver-secret-0123456789"
ADMIN = "admin-secret-0123456789"
TOKENS = f"alice:agent:{AGENT},bob:agent:{AGENT2},carol:approver:{APPROVER},root:admin:{ADMIN}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def listens_on(pid: int, port: int) -> bool:
    """Whether process `pid` holds the socket listening on `port`. `free_port` hands out a port
    that is free now: a server started as a process binds it only once its start is done, a
    second or two later, and in that window another test's server (the suite runs on two
    workers) may take the same port and answer the first one's readiness probe."""
    listening = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    listening.add(f"socket:[{fields[9]}]")  # 0A: LISTEN
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for descriptor in descriptors:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{descriptor}") in listening:
                return True
    return False


@dataclass
class LiveServer:
    base_url: str
    settings: Settings
    data_dir: Path

    def client(self, token: str | None = AGENT, timeout: float = 60) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    def async_client(self, token: str | None = AGENT, timeout: float = 60) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=timeout)

    def database_engine(self) -> Engine:
        """An engine on this server's database, to look (or reach) behind the API."""
        return create_engine(self.settings.resolved_database_url)

    @property
    def ws_url(self) -> str:
        return self.base_url.replace("http://", "ws://")


def make_settings(tmp: Path, database: ServerDatabase, **overrides: Any) -> Settings:
    """Settings for a test server in `tmp`, on `database` (a `database` fixture, or `SQLITE`
    for a test that is about SQLite alone)."""
    workspace = tmp / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    values: dict[str, Any] = {
        "data_dir": tmp / "data",
        "workspace": workspace,
        "tokens": TOKENS,
        "kill_grace_seconds": 2.0,
        # The in-process test servers inspect host pids, daemons kept after a run and files in
        # the host's /tmp: they run unsandboxed. tests/api/test_sandbox.py and every server
        # started as a process (`python -m app serve`) run with the sandbox at its default, on.
        "sandbox": "off",
        **database.settings(),
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)


@contextlib.contextmanager
def serve(settings: Settings, *, tracing: Tracing | None = None) -> Iterator[LiveServer]:
    port = free_port()
    config = uvicorn.Config(
        create_app(settings, tracing=tracing),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        **server_options(settings),
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    eventually(
        lambda: server.started or not thread.is_alive(), what="the test server's start", within=30
    )
    if not server.started:
        raise RuntimeError("test server did not start")
    try:
        yield LiveServer(f"http://127.0.0.1:{port}", settings, settings.data_dir)
    finally:
        server.should_exit = True
        thread.join(30)


def run_foreground(client: httpx.Client, command: str, **fields: object) -> dict[str, object]:
    """POST a command and return its record, asserting the call answered 200."""
    response = client.post("/v1/executions", json={"command": command, **fields})
    assert response.status_code == 200, response.text
    body: dict[str, object] = response.json()
    return body


# --- the databases ---------------------------------------------------------------------------


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run every test that (through its fixtures) uses a database once per kind."""
    if "database_kind" not in metafunc.fixturenames:
        return
    kinds = [pytest.param("sqlite", id="sqlite")]
    sqlite_only = metafunc.definition.get_closest_marker("sqlite_only")
    if sqlite_only is not None and not sqlite_only.args:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: sqlite_only needs its reason")
    if sqlite_only is None:
        kinds.append(pytest.param("postgres", id="postgres", marks=pytest.mark.postgres))
    metafunc.parametrize("database_kind", kinds, indirect=True, scope="session")


@pytest.fixture(scope="session", autouse=True)
def no_cgroups_left(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """At the end, the cgroups of this session's servers that are still there (a server the
    test killed cannot remove its own): tests/cgroup_leftovers.py."""
    yield
    remove_test_servers_cgroups(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="session")
def database_kind(request: pytest.FixtureRequest) -> str:
    """ "sqlite" or "postgres": which half of the suite this test belongs to."""
    kind: str = request.param
    return kind


@pytest.fixture(scope="session")
def postgres_databases() -> Iterator[PostgresDatabases]:
    """The session's PostgreSQL: a migrated template and the databases copied from it."""
    reason = postgres_unreachable_reason()
    if reason is not None:
        pytest.skip(reason)  # with CI=true the run stopped at collection already
    databases = PostgresDatabases()
    try:
        yield databases
    finally:
        databases.close()


def _databases_of_kind(kind: str, request: pytest.FixtureRequest) -> Iterator[Databases]:
    postgres = request.getfixturevalue("postgres_databases") if kind == "postgres" else None
    databases = Databases(kind, postgres)
    try:
        yield databases
    finally:
        databases.close()


@pytest.fixture
def database(database_kind: str, request: pytest.FixtureRequest) -> Iterator[ServerDatabase]:
    """This test's own database: SQLite in the server's data dir, or a fresh PostgreSQL one.
    Several servers given the same one share it (a restart, or the multi-replica tests)."""
    for databases in _databases_of_kind(database_kind, request):
        yield databases.new()


@pytest.fixture(scope="module")
def module_databases(database_kind: str, request: pytest.FixtureRequest) -> Iterator[Databases]:
    """For module-scoped servers: `module_databases.new()` is a database of its own for each
    (on SQLite, its data dir's file), dropped when the module ends."""
    yield from _databases_of_kind(database_kind, request)


@pytest.fixture(scope="session")
def session_databases(database_kind: str, request: pytest.FixtureRequest) -> Iterator[Databases]:
    """The same for session-scoped servers."""
    yield from _databases_of_kind(database_kind, request)


@pytest.fixture
def empty_database_url(
    database_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[str]:
    """The URL of a database with no tables yet, for the migration tests."""
    if database_kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    postgres: PostgresDatabases = request.getfixturevalue("postgres_databases")
    with postgres.database(migrated=False) as empty:
        assert empty.url is not None
        yield empty.url


# --- the servers -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fg_server(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[LiveServer]:
    """A server per test module with auto-background off, so short timeouts expire in the
    foreground call itself."""
    settings = make_settings(
        tmp_path_factory.mktemp("fg"), module_databases.new(), auto_background_ms=0
    )
    with serve(settings) as live:
        yield live


@pytest.fixture
def fg(fg_server: LiveServer) -> Iterator[httpx.Client]:
    with fg_server.client(AGENT) as client:
        yield client


@pytest.fixture(scope="session")
def server(
    tmp_path_factory: pytest.TempPathFactory, session_databases: Databases
) -> Iterator[LiveServer]:
    """One shared server (per database kind) for tests that do not depend on special settings."""
    settings = make_settings(tmp_path_factory.mktemp("shared"), session_databases.new())
    with serve(settings) as live:
        yield live


@pytest.fixture
def agent(server: LiveServer) -> Iterator[httpx.Client]:
    with server.client(AGENT) as client:
        yield client


@pytest.fixture
def fresh_server(
    tmp_path: Path, database: ServerDatabase, request: pytest.FixtureRequest
) -> Iterator[LiveServer]:
    """A server of its own; settings come from `@pytest.mark.settings(...)`."""
    marker = request.node.get_closest_marker("settings")
    overrides = dict(marker.kwargs) if marker else {}
    with serve(make_settings(tmp_path, database, **overrides)) as live:
        yield live


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "settings(**kw): Settings overrides for fresh_server")
    config.addinivalue_line(
        "markers", "sqlite_only(reason): a test about SQLite itself; no postgres half"
    )
    os.environ.setdefault("SHELLGATE_TEST", "1")


@pytest.hookimpl(trylast=True)  # after -m / -k have deselected: `-m "not postgres"` is explicit
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In CI the PostgreSQL half must run: stop before the first test if it cannot."""
    if os.environ.get("CI", "").lower() != "true":
        return
    if not any(item.get_closest_marker("postgres") for item in items):
        return
    reason = postgres_unreachable_reason()
    if reason is not None:
        pytest.exit(f"CI=true needs PostgreSQL for the postgres half of the suite: {reason}", 3)
