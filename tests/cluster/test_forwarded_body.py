"""The forwarding reads a request's body to find a submit's session and to carry it to the
owner: it must hand on the whole body, however large the server's limits let it be (with
`SHELLGATE_MAX_COMMAND_BYTES` at its 16 MiB maximum a submit may be ~100 MiB). It kept only
the first 32 MiB, so a larger body was replayed or forwarded cut short."""

from __future__ import annotations

import anyio

from app.cluster.forwarding import read_body

MiB = 1024 * 1024


def test_the_whole_body_is_read_whatever_its_size() -> None:
    pieces = [bytes([n]) * MiB for n in range(40)]  # 40 MiB, each MiB told apart

    async def read() -> bytes:
        messages = [
            {"type": "http.request", "body": piece, "more_body": n < len(pieces) - 1}
            for n, piece in enumerate(pieces)
        ]

        async def receive() -> dict[str, object]:  # the ASGI server's side, message by message
            return messages.pop(0)

        return await read_body(receive)

    body = anyio.run(read)
    assert len(body) == 40 * MiB
    assert body == b"".join(pieces)
