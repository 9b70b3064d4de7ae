"""The live stream of one execution over a WebSocket, and the tickets browsers use to open it
(docs/streaming.md#the-execution-stream). The frames and what they mean live in
`app/executions/viewer.py`; this module is the
socket plumbing: handshake, close codes, one sender, one reader, keepalive.

Close codes: 1000 after the exit frame; 4000 + the HTTP status the same error would have on
REST (4401 unauthenticated, 4403 forbidden, 4404 not found or another agent's, 4422 a bad
offset, 4410 a log gone from disk); 1011 when the stream fails on the server's side; 1012 when
the server stops; 1013 for a temporary condition (the database or the replica holding the
log does not answer; app/cluster/forwarding.py also closes a relayed stream with it when the
owner dies mid-stream). The
socket is accepted before authenticating so that the client sees these codes and their
reasons; a refusal before the handshake would reach it as a bare HTTP 403.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator
from typing import Final

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from app.api.deps import PrincipalDep, ServicesDep, WebSocketServicesDep, websocket_principal
from app.api.errors import error_responses, status_for
from app.api.operation_ids import operation_id
from app.api.strict_route import StrictJsonRoute
from app.core.auth import Principal
from app.core.errors import AppError, UnavailableError
from app.executions.viewer import (
    PING_FRAME,
    ExecutionViewer,
    Frame,
    encode_frame,
    error_frame,
    handle_client_frame,
    parse_format,
    parse_offset,
)
from app.schemas import WsTicket
from app.services import Services

logger = logging.getLogger("shellgate.stream")

router = APIRouter(
    generate_unique_id_function=operation_id, tags=["stream"], route_class=StrictJsonRoute
)

CLOSE_NORMAL: Final = 1000
CLOSE_INTERNAL_ERROR: Final = 1011
CLOSE_SERVICE_RESTART: Final = 1012
# A temporary condition (the database or the replica holding the log does not answer): the
# standard "try again later", which a client reconnects on, as it does when the forwarding
# cannot reach an owner; a 4xxx code tells it to give up.
CLOSE_TRY_AGAIN_LATER: Final = 1013
_MAX_REASON_BYTES: Final = 123  # RFC 6455: the close payload is 125 bytes, 2 of them the code


@router.post(
    "/v1/ws-tickets",
    response_model=WsTicket,
    status_code=201,
    responses=error_responses(401),
    summary="Issue a single-use WebSocket ticket",
    description="For clients that cannot send an Authorization header on a WebSocket "
    "(browsers): pass it as `?ticket=` when opening `WS /v1/executions/{id}/stream` or "
    "`WS /v1/approvals/stream` (protocols in the API description). Single use; it expires "
    "after `SHELLGATE_WS_TICKET_SECONDS` (default 60) and acts with the issuing token's "
    "identity.",
)
async def issue_ws_ticket(principal: PrincipalDep, services: ServicesDep) -> WsTicket:
    ticket, expires_at = await services.tickets.issue(
        principal, services.settings.ws_ticket_seconds
    )
    return WsTicket(ticket=ticket, expires_at=expires_at)


@router.websocket("/v1/executions/{execution_id}/stream")
async def stream_execution(
    websocket: WebSocket, execution_id: str, services: WebSocketServicesDep
) -> None:
    await websocket.accept()
    try:
        principal = await websocket_principal(websocket, services)
        offset = parse_offset(websocket.query_params.get("offset"))
        binary = parse_format(websocket.query_params.get("format"))
        record = await services.executions.authorize_read(principal, execution_id)
    except AppError as error:
        await _close(websocket, close_code_for(error), error.message)
        return
    viewer = ExecutionViewer(services.executions, principal, record, offset, binary=binary)
    with services.metrics.stream_viewers.track_inprogress():
        await _Conversation(websocket, services, principal, execution_id).run(viewer.frames())


class _Conversation:
    """One socket: frames out in order (awaiting each send, so a slow client slows only
    itself), client frames in, a ping when the line has been quiet."""

    def __init__(
        self, websocket: WebSocket, services: Services, principal: Principal, execution_id: str
    ) -> None:
        self._websocket = websocket
        self._services = services
        self._principal = principal
        self._execution_id = execution_id
        self._send_lock = asyncio.Lock()
        self._last_sent = asyncio.get_running_loop().time()

    async def run(self, frames: AsyncGenerator[Frame | str | bytes, None]) -> None:
        sender = asyncio.create_task(self._send_all(frames))
        reader = asyncio.create_task(self._read_all())
        keepalive = asyncio.create_task(self._keep_alive())
        stopping = asyncio.create_task(self._services.executions.until_stopping())
        try:
            await asyncio.wait({sender, reader, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sender, reader, keepalive, stopping):
                task.cancel()
            await asyncio.gather(sender, reader, keepalive, stopping, return_exceptions=True)
        if stopping.done() and not stopping.cancelled():
            # Before the command's own end frame: the viewer reconnects to the next instance.
            await _close(self._websocket, CLOSE_SERVICE_RESTART, "server restarting")
        elif not sender.cancelled() and sender.done():
            error = sender.exception()
            if error is None:
                await _close(self._websocket, CLOSE_NORMAL, "exit")
            elif isinstance(error, AppError):
                await _close(self._websocket, close_code_for(error), error.message)
            elif not isinstance(error, WebSocketDisconnect):
                logger.error("stream of %s failed", self._execution_id, exc_info=error)
                await _close(self._websocket, CLOSE_INTERNAL_ERROR, "stream failed")

    async def _send(self, frame: Frame | str | bytes) -> None:
        # Output frames arrive encoded: JSON text, or binary messages (`?format=binary`).
        async with self._send_lock:
            if isinstance(frame, bytes):
                await self._websocket.send_bytes(frame)
            else:
                await self._websocket.send_text(
                    frame if isinstance(frame, str) else encode_frame(frame)
                )
            self._last_sent = asyncio.get_running_loop().time()

    async def _send_all(self, frames: AsyncGenerator[Frame | str | bytes, None]) -> None:
        try:
            async for frame in frames:
                await self._send(frame)
        finally:
            await frames.aclose()

    async def _read_all(self) -> None:
        while True:
            message = await self._websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            text = message.get("text")
            if text is None:
                reply: Frame | None = error_frame("invalid_frame", "send JSON text frames")
            else:
                reply = await handle_client_frame(
                    self._services.executions, self._principal, self._execution_id, text
                )
            if reply is not None:
                await self._send(reply)

    async def _keep_alive(self) -> None:
        """A `ping` frame after `ws_ping_seconds` of silence: proxies that ignore protocol
        pings (uvicorn sends those) still see traffic and keep the socket open."""
        interval = self._services.settings.ws_ping_seconds
        loop = asyncio.get_running_loop()
        while True:
            quiet_for = loop.time() - self._last_sent
            if quiet_for >= interval:
                await self._send(PING_FRAME)
            else:
                await asyncio.sleep(interval - quiet_for)


def close_code_for(error: AppError) -> int:
    """4000 + the HTTP status the same problem gets on REST; 1013 for a temporary one."""
    if isinstance(error, UnavailableError):
        return CLOSE_TRY_AGAIN_LATER
    return 4000 + status_for(error)


async def _close(websocket: WebSocket, code: int, reason: str) -> None:
    encoded = reason.encode()[:_MAX_REASON_BYTES]
    with contextlib.suppress(WebSocketDisconnect, RuntimeError):
        await websocket.close(code, encoded.decode(errors="ignore"))
