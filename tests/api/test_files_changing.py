"""A file whose size changes while it is downloaded (docs/api.md#files), through a real
server: one that grows is sent exactly as long as it was when opened; one that shrinks ends
the connection short of its `Content-Length` (the status line is already out, so the cut is
what tells the client), with a warning in the log, no traceback, and the read recorded
`failed`. Every file lives in the test server's own workspace."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import AGENT, LiveServer, make_settings, serve
from tests.databases import Databases
from tests.waiting import eventually

# Far more than the socket buffers hold while the client does not read: when the file is
# truncated, most of it is still to be read from the disk.
SIZE = 30 * 1024 * 1024
SHRUNK = 1_000


@pytest.fixture(scope="module")
def live(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[LiveServer]:
    with serve(make_settings(tmp_path_factory.mktemp("changing"), module_databases.new())) as s:
        yield s


@pytest.fixture
def alice(live: LiveServer) -> Iterator[httpx.Client]:
    with live.client(AGENT) as client:
        yield client


@pytest.fixture
def server_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """The server's log, uvicorn's own errors included (its logger does not propagate)."""
    caplog.set_level(logging.INFO)
    uvicorn_errors = logging.getLogger("uvicorn.error")
    uvicorn_errors.addHandler(caplog.handler)
    try:
        yield caplog
    finally:
        uvicorn_errors.removeHandler(caplog.handler)


def _content(size: int) -> bytes:
    return (bytes(range(256)) * (size // 256 + 1))[:size]


def _read_of(client: httpx.Client, path: Path) -> dict[str, object]:
    operations = client.get("/v1/files/operations").json()["data"]
    reads = [op for op in operations if op["op"] == "read" and op["path"] == str(path)]
    assert reads, f"no read of {path} recorded"
    newest: dict[str, object] = reads[0]
    return newest


RANGES = {
    "whole": None,
    "one range": "bytes=0-",
    "several ranges": f"bytes=0-99,{SIZE // 2}-{SIZE - 1}",
}


@pytest.mark.parametrize("header", RANGES.values(), ids=RANGES.keys())
def test_a_file_that_shrinks_while_it_is_sent_cuts_the_connection_and_fails_the_read(
    live: LiveServer, alice: httpx.Client, server_log: pytest.LogCaptureFixture, header: str | None
) -> None:
    """Before: uvicorn's `RuntimeError: Response content shorter than Content-Length` (or
    Starlette's `File at path … is shorter than expected`) logged with its traceback as an
    unhandled error, and the read recorded `completed`."""
    path = live.settings.workspace / f"shrinks-{uuid.uuid4().hex}.bin"
    path.write_bytes(_content(SIZE))
    headers = {"Range": header} if header else {}
    received = 0
    with alice.stream("GET", "/v1/files", params={"path": str(path)}, headers=headers) as got:
        assert got.status_code == (206 if header else 200)
        announced = int(got.headers["content-length"])
        chunks = got.iter_raw()
        received += len(next(chunks))
        os.truncate(path, SHRUNK)  # the server has sent what the socket buffers hold, at most
        with pytest.raises(httpx.RemoteProtocolError):  # the body ends short: the client knows
            for chunk in chunks:
                received += len(chunk)
    assert received < announced

    def failed() -> dict[str, object] | None:
        read = _read_of(alice, path)
        return read if read["state"] == "failed" else None

    read = eventually(failed, what="the read recorded failed", within=10)
    assert "shrank while it was sent" in str(read["message"]), read
    assert read["size"] == SIZE  # what it was when the read began
    records = server_log.records
    assert not [r for r in records if r.exc_info or r.levelno >= logging.ERROR], [
        r.getMessage() for r in records if r.levelno >= logging.ERROR
    ]
    warnings = [
        r.getMessage()
        for r in records
        if r.name == "shellgate.files" and r.levelno == logging.WARNING
    ]
    assert any(str(path) in line and "shrank while it was sent" in line for line in warnings)


@pytest.mark.parametrize("header", RANGES.values(), ids=RANGES.keys())
def test_a_file_that_grows_while_it_is_sent_is_sent_as_long_as_it_was(
    live: LiveServer, alice: httpx.Client, server_log: pytest.LogCaptureFixture, header: str | None
) -> None:
    path = live.settings.workspace / f"grows-{uuid.uuid4().hex}.bin"
    content = _content(SIZE)
    path.write_bytes(content)
    headers = {"Range": header} if header else {}
    with alice.stream("GET", "/v1/files", params={"path": str(path)}, headers=headers) as got:
        assert got.status_code == (206 if header else 200)
        announced = int(got.headers["content-length"])
        kind = got.headers["content-type"]
        chunks = got.iter_raw()
        body = bytearray(next(chunks))
        with path.open("ab") as grown:
            grown.write(b"\xff" * (4 * 1024 * 1024))
        for chunk in chunks:
            body += chunk
    assert len(body) == announced
    if header is None or header == "bytes=0-":
        assert body == content
    else:  # multipart/byteranges: each part as it was, then the closing boundary
        assert body.index(content[:100]) < body.index(content[SIZE // 2 :])
        boundary = kind.split("boundary=", 1)[1].encode()
        assert body.endswith(content[SIZE // 2 :] + b"\r\n--" + boundary + b"--")
    assert _read_of(alice, path)["state"] == "completed"
    assert not [r for r in server_log.records if r.levelno >= logging.WARNING]
