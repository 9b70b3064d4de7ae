"""The harness that starts a real server for a test (tests/faults/server_process.py): a port
handed out free and taken by another test's server before this one binds it must not make the
test talk to that other server (CI saw a held call answered by another test's server once)."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port, listens_on
from tests.databases import SQLITE
from tests.faults import server_process as harness


def test_a_port_taken_before_the_server_binds_it_is_traded_for_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()  # answers no HTTP: the readiness probe waits in vain there
        other = free_port()
        ports = iter([taken.getsockname()[1], other])
        monkeypatch.setattr(harness, "free_port", lambda: next(ports))
        env = harness.server_env(tmp_path, SQLITE)
        with harness.server_process(env, tmp_path / "server.log") as live:
            assert live.base_url == f"http://127.0.0.1:{other}"
            assert listens_on(live.process.pid, other)
            assert httpx.get(f"{live.base_url}/healthz", timeout=10).status_code == 200
        assert "address already in use" in (tmp_path / "server.log").read_text()
