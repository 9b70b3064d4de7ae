"""A request's line and headers are bounded in size and in time (app/server/http_server.py): uvicorn
bounds neither, and one 64 MiB header took 2.5 s of the event loop to gather (then a 200),
while a client trickling its headers held a connection for good (RELIABILITY.md, "One request
against all the others")."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from app.server.http_server import MAX_HEAD_BYTES
from tests.conftest import LiveServer, make_settings, serve
from tests.databases import ServerDatabase


def _connect(server: LiveServer) -> socket.socket:
    address = urlsplit(server.base_url)
    assert address.hostname is not None and address.port is not None
    return socket.create_connection((address.hostname, address.port), timeout=10)


def _answer(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _get(header_bytes: int) -> bytes:
    return (
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: "
        + b"v" * header_bytes
        + b"\r\n\r\n"
    )


def test_a_head_over_the_limit_is_a_431_and_one_under_it_is_served(server: LiveServer) -> None:
    with _connect(server) as sock:
        sock.sendall(_get(4 * MAX_HEAD_BYTES))  # read and dropped after the refusal
        refused = _answer(sock)
    with _connect(server) as sock:
        sock.sendall(_get(MAX_HEAD_BYTES - 200))
        served = _answer(sock)
    assert refused.startswith(b"HTTP/1.1 431 "), refused[:80]
    assert refused.endswith(
        f"The request line and headers are larger than {MAX_HEAD_BYTES} bytes.".encode()
    )
    assert served.startswith(b"HTTP/1.1 200 "), served[:80]


@pytest.fixture
def quick_heads(tmp_path: Path, database: ServerDatabase) -> LiveServer:
    with serve(make_settings(tmp_path, database, head_timeout_seconds=1.0)) as live:
        yield live


def _closed_after(sock: socket.socket, trickle: bool, within: float) -> float | None:
    """Seconds until the server closes `sock` (None: still open after `within`)."""
    started = time.monotonic()
    sock.settimeout(0.25)
    while time.monotonic() - started < within:
        if trickle:
            try:
                sock.send(b"a")
            except OSError:
                return time.monotonic() - started
        try:
            if sock.recv(1) == b"":
                return time.monotonic() - started
        except TimeoutError:
            continue
        except OSError:
            return time.monotonic() - started
    return None


def test_a_head_that_trickles_or_never_comes_is_cut_off(quick_heads: LiveServer) -> None:
    with _connect(quick_heads) as slow, _connect(quick_heads) as silent:
        slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        trickled = _closed_after(slow, trickle=True, within=10)
        waited = _closed_after(silent, trickle=False, within=10)
    assert trickled is not None and waited is not None  # before: open for good
    assert trickled < 5 and waited < 5


def test_a_kept_alive_connection_may_idle_between_requests_past_the_head_time(
    quick_heads: LiveServer,
) -> None:
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    with _connect(quick_heads) as sock:
        sock.sendall(request)
        first = sock.recv(65536)
        time.sleep(2)  # the head time is 1 s; the keep-alive time 75 s
        sock.sendall(request)
        second = sock.recv(65536)
    assert first.startswith(b"HTTP/1.1 200 ")
    assert second.startswith(b"HTTP/1.1 200 ")
