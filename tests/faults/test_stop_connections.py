"""A request that reaches a stopping server on a connection it accepted before the stop is
answered, never dropped unread (app/server/http_server.py): a gateway connects, the server
gets SIGTERM and closes its listener, then the gateway's POST arrives on that connection. A
dropped POST is one the gateway cannot tell from one that ran, so it answers the client 502;
a 503 `shutting_down` it retries on another replica (tests/cluster/gateway.py, as nginx)."""

from __future__ import annotations

import json
import signal
import socket
from pathlib import Path

import httpx

from tests.conftest import AGENT
from tests.databases import SQLITE
from tests.faults.server_process import server_env, server_process
from tests.waiting import eventually


def _refuses_connections(address: tuple[str, int]) -> bool:
    try:
        with socket.create_connection(address, timeout=2):
            return False
    except ConnectionRefusedError:
        return True


def _answer(connection: socket.socket) -> bytes:
    received = b""
    while chunk := connection.recv(65536):
        received += chunk
    return received


def test_a_post_on_a_connection_accepted_before_the_stop_gets_503_shutting_down(
    tmp_path: Path,
) -> None:
    with server_process(server_env(tmp_path, SQLITE), tmp_path / "server.log") as server:
        host, port = server.base_url.removeprefix("http://").rsplit(":", 1)
        address = (host, int(port))
        with socket.create_connection(address, timeout=30) as early:
            # Accepted in order: once a later connection is answered, this one was accepted.
            assert httpx.get(server.base_url + "/healthz", timeout=30).status_code == 200
            server.process.send_signal(signal.SIGTERM)  # this test's own server, by its pid
            eventually(lambda: _refuses_connections(address), what="the listener closed")
            body = json.dumps({"command": "echo late"}).encode()
            early.sendall(
                b"POST /v1/executions HTTP/1.1\r\nHost: shellgate\r\n"
                + f"Authorization: Bearer {AGENT}\r\n".encode()
                + b"Content-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            answer = _answer(early)
        assert server.process.wait(30) in (0, -signal.SIGTERM), server.log()
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503"), answer
    assert b"connection: close" in head.lower(), head
    assert json.loads(payload)["error"]["code"] == "shutting_down", payload
