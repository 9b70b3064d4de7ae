"""Fixtures: a real uvicorn serving the real app on loopback, with a real SQLite file."""

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

from app.config import Settings
from app.http_server import server_options
from app.main import create_app
from app.observability.tracing import Tracing
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

    @property
    def ws_url(self) -> str:
        return self.base_url.replace("http://", "ws://")


def make_settings(tmp: Path, **overrides: Any) -> Settings:
    workspace = tmp / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    values: dict[str, Any] = {
        "data_dir": tmp / "data",
        "workspace": workspace,
        "tokens": TOKENS,
        "kill_grace_seconds": 2.0,
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


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


@pytest.fixture(scope="module")
def fg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A server per test module with auto-background off, so short timeouts expire in the
    foreground call itself."""
    settings = make_settings(tmp_path_factory.mktemp("fg"), auto_background_ms=0)
    with serve(settings) as live:
        yield live


@pytest.fixture
def fg(fg_server: LiveServer) -> Iterator[httpx.Client]:
    with fg_server.client(AGENT) as client:
        yield client


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One shared server for tests that do not depend on special settings."""
    with serve(make_settings(tmp_path_factory.mktemp("shared"))) as live:
        yield live


@pytest.fixture
def agent(server: LiveServer) -> Iterator[httpx.Client]:
    with server.client(AGENT) as client:
        yield client


@pytest.fixture
def fresh_server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LiveServer]:
    """A server of its own; settings come from `@pytest.mark.settings(...)`."""
    marker = request.node.get_closest_marker("settings")
    overrides = dict(marker.kwargs) if marker else {}
    with serve(make_settings(tmp_path, **overrides)) as live:
        yield live


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "settings(**kw): Settings overrides for fresh_server")
    os.environ.setdefault("SHELLGATE_TEST", "1")
