"""The download's response (app/api/file_response.py) sends the bytes of the file it was
handed, open since the files service judged it, and never opens its path again: a name
swapped for another file afterwards (a hard link to a protected one) sends nothing of that
file. Driven as ASGI, with the messages it sends collected."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from app.api.file_response import SizedFileResponse


async def _send_through(response: SizedFileResponse, headers: list[tuple[bytes, bytes]]) -> bytes:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "headers": headers, "extensions": {}}
    await response(scope, receive, send)
    return b"".join(message.get("body", b"") for message in sent)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ([], b"judged content"),
        ([(b"range", b"bytes=0-5")], b"judged"),
        ([(b"range", b"bytes=0-1,7-8")], None),  # multipart: each part from the judged file
    ],
)
def test_the_bytes_sent_are_those_of_the_file_opened_not_of_the_path_now(
    tmp_path: Path, headers: list[tuple[bytes, bytes]], expected: bytes | None
) -> None:
    name = tmp_path / "name.txt"
    name.write_bytes(b"judged content")
    file = open(name, "rb")  # noqa: SIM115 - the response owns and closes it
    info = os.fstat(file.fileno())
    swapped = tmp_path / "swapped"
    swapped.write_bytes(b"PROTECTED!!!!!")  # as long, so no size check could tell
    os.replace(swapped, name)
    response = SizedFileResponse(
        str(name), file=file, stat_result=info, media_type="application/octet-stream"
    )
    body = anyio.run(_send_through, response, headers)
    assert b"PROTECTED" not in body
    if expected is not None:
        assert body == expected
    else:
        assert b"ju" in body and b"co" in body
    assert file.closed


def test_a_head_request_closes_the_file_it_never_read(tmp_path: Path) -> None:
    name = tmp_path / "name.txt"
    name.write_bytes(b"content")
    file = open(name, "rb")  # noqa: SIM115 - the response owns and closes it
    response = SizedFileResponse(
        str(name),
        file=file,
        stat_result=os.fstat(file.fileno()),
        media_type="application/octet-stream",
    )
    sent: list[dict[str, Any]] = []

    async def run() -> None:
        async def receive() -> dict[str, Any]:
            await anyio.sleep_forever()
            raise AssertionError("unreachable")

        async def send(message: Any) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "HEAD", "headers": [], "extensions": {}}
        await response(scope, receive, send)

    anyio.run(run)
    assert sent[0]["status"] == 200
    assert file.closed
