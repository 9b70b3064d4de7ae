"""HTTP keep-alive: the server keeps an idle connection open for `keepalive_seconds` (by default
longer than a gateway's or a client pool's idle cut, so they close first) and logs each
connection it drops."""

from __future__ import annotations

import logging
import socket
import time
from pathlib import Path

import pytest

from app.core.config import Settings
from tests.conftest import make_settings, serve
from tests.databases import ServerDatabase

REQUEST = b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n"


def read_response(sock: socket.socket) -> bytes:
    """One response to GET /healthz (headers and a Content-Length body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return head


def test_the_default_keepalive_outlasts_a_gateways_idle_cut() -> None:
    assert Settings(_env_file=None).keepalive_seconds > 60  # type: ignore[call-arg]


def test_an_idle_connection_stays_open_until_keepalive_seconds_then_is_dropped_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, database: ServerDatabase
) -> None:
    caplog.set_level(logging.INFO, logger="shellgate.http")
    with (
        serve(make_settings(tmp_path, database, keepalive_seconds=1)) as server,
        socket.create_connection(("127.0.0.1", int(server.base_url.rsplit(":", 1)[1]))) as sock,
    ):
        sock.settimeout(10)
        sock.sendall(REQUEST)
        assert read_response(sock).startswith(b"HTTP/1.1 200")
        # Reused well inside the idle limit: the same connection answers.
        time.sleep(0.3)
        sock.sendall(REQUEST)
        assert read_response(sock).startswith(b"HTTP/1.1 200")
        answered = time.monotonic()
        assert sock.recv(1) == b""  # the server closes it once idle for keepalive_seconds
        idle = time.monotonic() - answered
    assert 0.9 <= idle < 8, idle
    dropped = [r.getMessage() for r in caplog.records if r.name == "shellgate.http"]
    assert any(
        "closing idle keep-alive connection" in line and "after 1 s" in line for line in dropped
    )


def test_a_request_the_server_cannot_parse_is_dropped_with_a_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, database: ServerDatabase
) -> None:
    caplog.set_level(logging.INFO, logger="shellgate.http")
    with (
        serve(make_settings(tmp_path, database)) as server,
        socket.create_connection(("127.0.0.1", int(server.base_url.rsplit(":", 1)[1]))) as sock,
    ):
        sock.settimeout(10)
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        response = b""
        while chunk := sock.recv(65536):
            response += chunk
    assert response.startswith(b"HTTP/1.1 400")
    dropped = [r.getMessage() for r in caplog.records if r.name == "shellgate.http"]
    assert any("Invalid HTTP request" in line for line in dropped)
