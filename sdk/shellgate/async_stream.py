"""A live connection to one execution's stream: frames in log order, reconnecting and resuming
at the last offset when the socket drops, and (for a PTY) input, resize and signals the other
way. Safe for one reader and any number of senders: threads with `Attachment`, tasks with
`AsyncAttachment`. sync_stream.py is generated from async_stream.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import TracebackType

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from shellgate.async_primitives import Lock, sleep
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
    """Iterate it for frames (`OutputFrame`, `StateFrame`, `GapFrame`, `ErrorFrame`, and last
    `ExitFrame`); `send`, `resize` and `signal` drive a PTY run from any thread (with
    `AsyncAttachment`, any task); `close()` detaches without ending the execution."""

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
        self._lock = Lock()
        self._socket: ClientConnection | None = None
        # Frames sent while no socket is up: the next socket carries them first, in order.
        self._pending: list[str] = []
        self._closed = False
        self.exit: ExitFrame | None = None

    @property
    def offset(self) -> int:
        """The offset after the last byte handed out: where a resume starts."""
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
        async with self._lock:
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
                await sleep(self._backoff.failed(f"the stream of {self.execution_id}"))
                continue
            # The context closes the socket; websockets 17 also expects it to be used so.
            async with socket:
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
                    await self._withdraw(socket)
            if self._closed:
                return
            await sleep(self._backoff.failed(f"the stream of {self.execution_id}"))

    async def send(self, data: str | bytes) -> None:
        """Type into the PTY (bytes that are not UTF-8 travel base64-encoded)."""
        await self._send(input_frame(data))

    async def resize(self, rows: int, cols: int) -> None:
        await self._send(resize_frame(rows, cols))

    async def signal(self, name: str) -> None:
        """INT, TERM, KILL, HUP or QUIT to the execution's process group."""
        await self._send(signal_frame(name))

    async def _publish(self, socket: ClientConnection) -> None:
        """Make `socket` the one to send over, after the frames that waited for it."""
        async with self._lock:
            while self._pending and not self._closed:
                try:
                    await socket.send(self._pending[0])
                except ConnectionClosed:
                    return  # this socket is gone too; the frames wait for the next one
                self._pending.pop(0)
            if not self._closed:
                self._socket = socket
                return
        await socket.close()  # closed while this socket opened: the reading loop ends on it

    async def _withdraw(self, socket: ClientConnection) -> None:
        async with self._lock:
            if self._socket is socket:
                self._socket = None

    async def _send(self, text: str) -> None:
        """Over the current socket; while the stream reconnects, over the next one. Never
        waits for a reconnect (the thread or task that iterates may be this one). A frame
        caught in a socket as it breaks may be lost; output never is."""
        async with self._lock:
            if self._closed:
                raise ShellgateError("the attachment is closed")
            if self._socket is not None:
                try:
                    await self._socket.send(text)
                    return
                except ConnectionClosed:
                    self._socket = None
            self._pending.append(text)


async def signal_once(base_url: str, token: str | None, execution_id: str, name: str) -> None:
    """Send one signal over a short-lived socket and wait for the server to have handled it:
    the server handles client frames in order, so the `pong` to a following `ping` confirms."""
    frame = signal_frame(name)
    # Past any real log end: no replay, only the state (and the exit of an ended run).
    socket = await open_socket(base_url, token, execution_id, 2**62)
    async with socket:
        await _confirm_signal(socket, frame, execution_id)


async def _confirm_signal(socket: ClientConnection, frame: str, execution_id: str) -> None:
    try:
        try:
            await socket.send(frame)
            await socket.send(PING_FRAME)
        except ConnectionClosed:
            # The stream of an ended run closes at once after its exit frame; that frame is
            # still queued for reading below, and says why nothing was signalled.
            pass
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
