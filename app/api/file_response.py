"""The download's response: Starlette's FileResponse (ranges, ETag, If-Range), sending exactly
the bytes it announced while the file changes under it.

The status line and `Content-Length` go out before the body, from the size the file had when
it was opened. A file that grows meanwhile is sent as long as it was (more would overrun the
header). A file that shrinks cannot fill the body: the only honest signal left is to end the
connection short of `Content-Length`, which every HTTP client reports as a truncated body.
uvicorn offers no way to do that: a body ended short is its `RuntimeError: Response content
shorter than Content-Length`, an unhandled error with its traceback (RELIABILITY.md, "The
server's own helper children"). The server's protocol (`app.server.http_server`) gives each request
a way to cut its connection, the scope extension `CUT_CONNECTION`, which this uses.

The bytes come from the file the files service opened and judged (`Readable.file`), never from
its path opened again: a path swapped for another file (a hard link to a protected one) after
the judgement sends nothing of it.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from secrets import token_hex
from typing import BinaryIO

import anyio
from fastapi.responses import FileResponse
from starlette.datastructures import MutableHeaders
from starlette.responses import MalformedRangeHeader, RangeNotSatisfiable
from starlette.types import Message, Receive, Scope, Send

from app.core.errors import BadRequestError, RangeNotSatisfiableError
from app.server.http_server import CUT_CONNECTION


class FileShrank(Exception):
    """The file ended before the bytes its response announced."""


class SizedFileResponse(FileResponse):
    """A download that sends exactly the `Content-Length` it announced, or cuts its connection
    (`on_cut` told why) when the file shrank; a `Range` it refuses is an error in the API's
    envelope, not Starlette's plain text."""

    def __init__(
        self,
        path: str,
        *,
        file: BinaryIO,
        stat_result: os.stat_result,
        media_type: str,
        on_cut: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        """`file`: open on what `path` led to when it was judged, with `stat_result` its
        stat; the response owns it and closes it once sent (or not sent)."""
        super().__init__(path, stat_result=stat_result, media_type=media_type)
        self._file = file
        self._on_cut = on_cut
        self._scope: Scope = {}
        self._sent = 0  # bytes of body sent
        self._announced = 0

    def check_range(self, http_range: str | None, http_if_range: str | None) -> None:
        """Raise the error the response would answer for this `Range` (and `If-Range`), as
        Starlette decides whether to use it; nothing when it would send the file."""
        if http_range is None:
            return
        if http_if_range is not None and not self._should_use_range(http_if_range):
            return
        assert self.stat_result is not None
        self._parse_range_header(http_range, self.stat_result.st_size)

    @classmethod
    def _parse_range_header(cls, http_range: str, file_size: int) -> list[tuple[int, int]]:
        # Raised before anything is sent, these reach the API's error handlers.
        try:
            return super()._parse_range_header(http_range, file_size)
        except MalformedRangeHeader:
            raise BadRequestError(
                f"Range {_shown(http_range)} is not a byte range: give `bytes=<first>-<last>`, "
                "`bytes=<first>-` or `bytes=-<count>`, several separated by commas, each with "
                "first <= last"
            ) from None
        except RangeNotSatisfiable:
            raise RangeNotSatisfiableError(
                f"Range {_shown(http_range)} asks for no byte of the file, which is "
                f"{file_size} bytes long",
                size=file_size,
            ) from None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._scope = scope
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._file.close()  # a HEAD, or a send that failed, never reached `_open_file`

    @asynccontextmanager
    async def _open_file(self) -> AsyncIterator[anyio.AsyncFile[bytes]]:
        yield anyio.wrap_file(self._file)

    # --- the three ways Starlette sends a file, each sending no byte past what it announced ---

    async def _handle_simple(self, send: Send, send_header_only: bool, send_pathsend: bool) -> None:
        # Never `pathsend`: the server would open the path again.
        if send_header_only:
            await super()._handle_simple(send, send_header_only, False)
            return
        size = self.stat_result.st_size if self.stat_result is not None else 0
        await self._start(send, self.status_code, self.raw_headers)
        await self._send_file(send, [(0, size)], _no_part_head, b"")

    async def _handle_single_range(
        self, send: Send, start: int, end: int, file_size: int, send_header_only: bool
    ) -> None:
        if send_header_only:
            await super()._handle_single_range(send, start, end, file_size, send_header_only)
            return
        headers = MutableHeaders(raw=list(self.raw_headers))
        headers["content-range"] = f"bytes {start}-{end - 1}/{file_size}"
        headers["content-length"] = str(end - start)
        await self._start(send, 206, headers.raw)
        await self._send_file(send, [(start, end)], _no_part_head, b"")

    async def _handle_multiple_ranges(
        self, send: Send, ranges: list[tuple[int, int]], file_size: int, send_header_only: bool
    ) -> None:
        if send_header_only:
            await super()._handle_multiple_ranges(send, ranges, file_size, send_header_only)
            return
        boundary = token_hex(13)
        content_length, part_head = self.generate_multipart(
            ranges, boundary, file_size, self.headers["content-type"]
        )
        headers = MutableHeaders(raw=list(self.raw_headers))
        headers["content-type"] = f"multipart/byteranges; boundary={boundary}"
        headers["content-length"] = str(content_length)
        await self._start(send, 206, headers.raw)
        await self._send_file(send, ranges, part_head, f"--{boundary}--".encode("latin-1"))

    async def _start(self, send: Send, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self._announced = int(dict(headers).get(b"content-length", b"0"))
        await send({"type": "http.response.start", "status": status, "headers": headers})

    async def _send_file(
        self,
        send: Send,
        ranges: list[tuple[int, int]],
        part_head: Callable[[int, int], bytes],
        closing: bytes,
    ) -> None:
        """Each range of the file (a multipart body wraps each in `part_head` and `\\r\\n`,
        and ends with `closing`); a file that ends before a range does is cut short."""
        multipart = len(ranges) > 1
        try:
            async with self._open_file() as file:
                for start, end in ranges:
                    if multipart:
                        await self._body(send, part_head(start, end))
                    await file.seek(start)
                    while start < end:
                        chunk = await file.read(min(self.chunk_size, end - start))
                        if not chunk:
                            raise FileShrank(f"it ended at byte {start}")
                        start += len(chunk)
                        await self._body(send, chunk)
                    if multipart:
                        await self._body(send, b"\r\n")
        except FileShrank as shrank:
            await self._cut(shrank)
            return
        await self._body(send, closing, more_body=False)

    async def _body(self, send: Send, body: bytes, *, more_body: bool = True) -> None:
        message: Message = {"type": "http.response.body", "body": body, "more_body": more_body}
        self._sent += len(body)
        await send(message)

    async def _cut(self, shrank: FileShrank) -> None:
        """The file is shorter than the body announced: say so (`on_cut`, shielded: the
        record must not stay `completed` because the client left meanwhile), then end the
        connection after what was sent. Without the server's extension (an in-process
        client), the error is raised as before the fix."""
        why = (
            f"the file shrank while it was sent ({shrank}): the body was cut after "
            f"{self._sent} of its {self._announced} bytes"
        )
        cut = self._scope.get("extensions", {}).get(CUT_CONNECTION)
        try:
            if self._on_cut is not None:
                with anyio.CancelScope(shield=True):
                    await self._on_cut(why)
        finally:
            if cut is not None:
                cut["cut"]()
        if cut is None:
            raise FileShrank(why)


def _no_part_head(start: int, end: int) -> bytes:
    """A body of one range has no part heads (those are multipart's)."""
    return b""


def _shown(header: str) -> str:
    """A header as an error message quotes it: the start of a long one is enough."""
    return repr(header if len(header) <= 100 else header[:100] + "…")
