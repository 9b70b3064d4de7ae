"""The async twin of `sync_stream.py`: a resuming, two-way connection to one execution's
stream, for one reader task and any number of sending tasks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import TracebackType

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from shellgate.calls import CONNECT_SECONDS, auth_headers
from shellgate.errors import ServerUnreachableError, ShellgateError
from shellgate.frames import (
    PING_FRAME,
    ErrorFrame,
    ExitFrame,
    Frame,
    GapFrame,
    OutputFrame,
    StreamCursor,
    input_frame,
    is_pong,
    parse_frame,
    refusal,
    resize_frame,
    signal_frame,
    stream_url,
)
from shellgate.reconnect import Backoff, frame_error

_CONNECT_ERRORS = (OSError, TimeoutError, InvalidHandshake, InvalidURI)


async def open_socket(
    base_url: str, token: str | None, execution_id: str, offset: int
) -> ClientConnection:
    try:
        return await connect(
            stream_url(base_url, execution_id, offset),
            additional_headers=auth_headers(token),
            open_timeout=CONNECT_SECONDS,
            max_size=None,
        )
    except _CONNECT_ERRORS as error:
        raise ServerUnreachableError(
            f"cannot open the stream at {base_url}: {error or type(error).__name__}"
        ) from None


class AsyncAttachment:
    """`async for frame in attachment`; `await send/resize/signal(...)` from other tasks;
    `await close()` detaches without ending the execution."""

    def __init__(
        self,
        base_url: str,
        token: str | None,
        execution_id: str,
        *,
        offset: int = 0,
        reconnects: int = 8,
    ) -> None:
        self.execution_id = execution_id
        self._base_url = base_url
        self._token = token
        self._cursor = StreamCursor(offset)
        self._backoff = Backoff(reconnects)
        self._socket: ClientConnection | None = None
        # Frames sent while no socket is up: the next socket carries them first, in order.
        self._pending: list[str] = []
        self._closed = False
        self.exit: ExitFrame | None = None

    @property
    def offset(self) -> int:
        return self._cursor.offset

    async def __aenter__(self) -> AsyncAttachment:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        self._closed = True
        socket, self._socket = self._socket, None
        if socket is not None:
            await socket.close()

    async def __aiter__(self) -> AsyncIterator[Frame]:
        while not self._closed:
            try:
                socket = await open_socket(
                    self._base_url, self._token, self.execution_id, self.offset
                )
            except ServerUnreachableError:
                await asyncio.sleep(self._backoff.failed(f"the stream of {self.execution_id}"))
                continue
            await self._publish(socket)
            try:
                async for message in socket:
                    frame = self._cursor.accept_message(message)
                    if frame is None:
                        continue
                    if isinstance(frame, (OutputFrame, GapFrame, ExitFrame)):
                        self._backoff.progressed()
                    yield frame
                    if isinstance(frame, ExitFrame):
                        self.exit = frame
                        return
            except ConnectionClosed as closed:
                if self._closed:
                    return
                if closed.rcvd is not None and (
                    error := refusal(closed.rcvd.code, closed.rcvd.reason)
                ):
                    raise error from None
            finally:
                self._withdraw(socket)
                await socket.close()
            if self._closed:
                return
            await asyncio.sleep(self._backoff.failed(f"the stream of {self.execution_id}"))

    async def send(self, data: str | bytes) -> None:
        await self._send(input_frame(data))

    async def resize(self, rows: int, cols: int) -> None:
        await self._send(resize_frame(rows, cols))

    async def signal(self, name: str) -> None:
        await self._send(signal_frame(name))

    async def _publish(self, socket: ClientConnection) -> None:
        """Make `socket` the one to send over, after the frames that waited for it."""
        if self._closed:  # closed while this socket opened: the reading loop ends on it
            await socket.close()
            return
        while self._pending:
            try:
                await socket.send(self._pending[0])
            except ConnectionClosed:
                return  # this socket is gone too; the frames wait for the next one
            self._pending.pop(0)
        self._socket = socket

    def _withdraw(self, socket: ClientConnection) -> None:
        if self._socket is socket:
            self._socket = None

    async def _send(self, text: str) -> None:
        """Over the current socket; while the stream reconnects, over the next one (never
        waiting for it). A frame caught in a socket as it breaks may be lost; output never
        is."""
        if self._closed:
            raise ShellgateError("the attachment is closed")
        socket = self._socket
        if socket is not None:
            try:
                await socket.send(text)
                return
            except ConnectionClosed:
                self._withdraw(socket)
        self._pending.append(text)


async def signal_once(base_url: str, token: str | None, execution_id: str, name: str) -> None:
    """See `sync_stream.signal_once`."""
    frame = signal_frame(name)
    socket = await open_socket(base_url, token, execution_id, 2**62)
    try:
        try:
            await socket.send(frame)
            await socket.send(PING_FRAME)
        except ConnectionClosed:
            pass  # an ended run's exit frame is still queued (see sync_stream.signal_once)
        async for message in socket:
            if is_pong(message):
                return
            parsed = parse_frame(message)
            if isinstance(parsed, (ErrorFrame, ExitFrame)):
                raise frame_error(execution_id, parsed)
        raise ServerUnreachableError(f"the stream of {execution_id} closed before answering")
    except ConnectionClosed as closed:
        if closed.rcvd is not None and (error := refusal(closed.rcvd.code, closed.rcvd.reason)):
            raise error from None
        raise ServerUnreachableError(f"the stream of {execution_id} broke off") from None
    finally:
        await socket.close()
