"""A WebSocket text frame that is not UTF-8 closes that connection with 1007 and is one INFO
line in the server's log, not an ERROR with a traceback per frame (one client could fill the
log with them)."""

from __future__ import annotations

import base64
import os
import socket
import struct
from pathlib import Path

from tests.conftest import AGENT
from tests.databases import ServerDatabase
from tests.faults.server_process import server_env, server_process
from tests.waiting import eventually

NOT_UTF8 = b"\xff\xfe{not text"


def _masked_text_frame(payload: bytes) -> bytes:
    mask = os.urandom(4)
    masked = bytes(byte ^ mask[i % 4] for i, byte in enumerate(payload))
    return bytes([0x81, 0x80 | len(payload)]) + mask + masked


def _close_code_after_bad_frame(port: int, path: str) -> int:
    """Upgrade by hand (a client library refuses to send such a frame), send it, read the
    server's close frame."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        key = base64.b64encode(os.urandom(16)).decode()
        connection.sendall(
            (
                f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                f"Sec-WebSocket-Version: 13\r\nAuthorization: Bearer {AGENT}\r\n\r\n"
            ).encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            head += connection.recv(4096)
        assert head.startswith(b"HTTP/1.1 101"), head
        rest = head.split(b"\r\n\r\n", 1)[1]
        connection.sendall(_masked_text_frame(NOT_UTF8))
        while True:
            while len(rest) < 2 or len(rest) < 2 + (rest[1] & 0x7F):
                chunk = connection.recv(4096)
                assert chunk, "closed without a close frame"
                rest += chunk
            length = rest[1] & 0x7F
            if rest[0] & 0x0F == 0x8:  # the close frame: its first two bytes are the code
                code: int = struct.unpack("!H", rest[2:4])[0]
                return code
            rest = rest[2 + length :]  # a data frame sent before it


def test_a_text_frame_that_is_not_utf8_closes_1007_with_one_log_line(
    tmp_path: Path, database: ServerDatabase
) -> None:
    env = server_env(tmp_path, database)
    with server_process(env, tmp_path / "server.log") as server, server.client() as client:
        job = client.post("/v1/executions", json={"command": "sleep 30", "async": True}).json()
        port = int(server.base_url.rsplit(":", 1)[1])
        code = _close_code_after_bad_frame(port, f"/v1/executions/{job['id']}/stream")
        assert code == 1007
        eventually(lambda: "was not UTF-8" in server.log(), what="the line", within=10)
        client.post(f"/v1/executions/{job['id']}/cancel")
        log = server.log()
    line = next(line for line in log.splitlines() if "was not UTF-8" in line)
    assert " INFO " in line
    assert "Traceback" not in log and "UnicodeDecodeError" not in log, log
