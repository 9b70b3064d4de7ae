"""Forwarding to the replica that owns the process (docs/operations.md#several-replicas).

Any replica answers any request from the database, except what needs the process: the live
stream, input, resize, signals, cancel, a long-poll or output read of a running execution, and
every call of a session (its shell lives on one node). Those go, as they came (the caller's
own token included, so the owner authorises them again), to the owning node's
`SHELLGATE_NODE_URL`, marked with the cluster secret so that the owner serves them itself.

A request carrying the marker without the right secret is refused: a client cannot make a
replica believe a request was forwarded. Without a secret nothing is forwarded (one node).
This is a pure ASGI middleware, so that a streamed body or a WebSocket passes through as it is.

An owner whose graceful stop has begun says so in its node row before it stops listening
(Cluster.leave), and ends or records every execution it runs as it stops. So a request about
one of its executions is not lost with its listener: a long-poll is answered here, following
the record in the database, and any other request that finds the owner stopping and no
longer answering waits here (up to the shutdown grace, or until this replica's own stop) for
the record to end, then is served as a finished execution's is. Only what needs the stopped
replica itself (a session's shell, a log on its own disk) answers 503 `node_unreachable`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import importlib
import json
import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from app.cluster import store
from app.cluster.node import Cluster
from app.core.asgi_replay import replay_body
from app.core.config import Settings
from app.core.errors import StorageFullError, UnavailableError
from app.observability.logs import current_request_id
from app.output.artifact_log import existing_log_path
from app.store.db import Database
from app.store.models import ExecutionState

if TYPE_CHECKING:
    import httpx
    from websockets.asyncio.client import ClientConnection

logger = logging.getLogger("shellgate.cluster")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

INTERNAL_HEADER = b"x-shellgate-cluster-secret"
FORWARDED_FROM_HEADER = b"x-shellgate-forwarded-from"
# Headers that describe one connection, not the request (RFC 9110, "Connection"), and the WebSocket
# handshake's own, which the client library makes anew.
HOP_BY_HOP = {
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"te",
    b"trailer",
    b"transfer-encoding",
    b"upgrade",
    b"host",
}
WEBSOCKET_HANDSHAKE = {
    b"sec-websocket-key",
    b"sec-websocket-version",
    b"sec-websocket-extensions",
    b"sec-websocket-protocol",
}
CONNECT_SECONDS = 5.0
CLOSE_TRY_AGAIN_LATER = 1013
CLOSE_FORBIDDEN = 4403

SUBMIT = "/v1/executions"
_EXECUTION_PATH = re.compile(r"^/v1/executions/([A-Za-z0-9_-]{1,64})(?:/([a-z]+))?$")
_SESSION_PATH = re.compile(r"^/v1/sessions/([A-Za-z0-9_-]{1,64})(?:/.*)?$")
_PROCESS_ACTIONS = {"input", "resize", "signal", "cancel", "output", "search", "stream"}
_LOG_ACTIONS = {"output", "search", "stream"}
_ACTIVE = {ExecutionState.running.value, ExecutionState.awaiting_approval.value}
# Follows another replica's execution in the database for up to so many seconds, until its
# record ends (ExecutionService.until_ended_elsewhere).
UntilEnded = Callable[[str, float], Awaitable[None]]


def _make_client() -> httpx.AsyncClient:
    import httpx

    return httpx.AsyncClient(
        timeout=httpx.Timeout(None, connect=CONNECT_SECONDS), follow_redirects=False
    )


class NodeUnreachableError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Target:
    node_id: str
    url: str
    # Whether the node's graceful stop has begun (its row says so).
    stopping: bool = False
    # The execution the request is about (None: a session's request).
    execution_id: str | None = None


class Forwarder:
    """Decides where a request belongs and carries it there."""

    def __init__(
        self, settings: Settings, cluster: Cluster, db: Database, until_ended: UntilEnded
    ) -> None:
        self._settings = settings
        self._cluster = cluster
        self._db = db
        self._until_ended = until_ended
        self.secret = settings.cluster_secret.encode()
        self.enabled = bool(settings.cluster_secret) and cluster.shared
        # Made on the first forward: httpx and websockets' client (with the CLI tools httpx
        # loads) stay out of a single node's start (tests/test_lazy_startup.py).
        self._client: httpx.AsyncClient | None = None
        self._client_made = asyncio.Lock()

    async def _http(self) -> httpx.AsyncClient:
        """The client, made on a worker thread the first time (importing httpx and loading
        the CA bundle would hold the event loop)."""
        async with self._client_made:
            if self._client is None:
                self._client = await anyio.to_thread.run_sync(_make_client)
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    def is_forwarded(self, headers: list[tuple[bytes, bytes]]) -> bool | None:
        """None: no marker; True: a genuine forward; False: a forged or unverifiable one."""
        values = [value for name, value in headers if name.lower() == INTERNAL_HEADER]
        if not values:
            return None
        return bool(self.secret) and hmac.compare_digest(values[0], self.secret)

    # --- where a request belongs --------------------------------------------------------------

    async def target(self, scope: Scope, body: bytes | None) -> Target | None:
        """The node to forward to, or None to serve here."""
        path = route_path(scope)
        method = scope.get("method", "GET")
        if (match := _EXECUTION_PATH.match(path)) is not None:
            execution_id, action = match.groups()
            if action is None and not (method == "GET" and _waits(scope)):
                return None
            if action is not None and action not in _PROCESS_ACTIONS:
                return None
            return await self._execution_target(execution_id, action)
        if (match := _SESSION_PATH.match(path)) is not None:
            return await self._session_target(match.group(1))
        if path == SUBMIT and method == "POST" and body is not None:
            session_id = _session_of(body)
            return None if session_id is None else await self._session_target(session_id)
        return None

    async def _execution_target(self, execution_id: str, action: str | None) -> Target | None:
        owner = await self._db.call(store.execution_owner, execution_id=execution_id)
        if owner is None:
            return None
        node_id, state = owner
        if node_id in (None, self._cluster.node_id):
            return None
        # Finished: its log is served from a shared data dir, else by the node that has it.
        if state not in _ACTIVE and (
            action not in _LOG_ACTIONS or await self._log_is_here(execution_id)
        ):
            return None
        target = await self._live_node(node_id)
        if target is None or (target.stopping and action is None):
            # A long-poll whose owner is stopping: the stop ends or records the execution,
            # and the wait here follows its record in the database (ExecutionReader.get).
            return None
        return replace(target, execution_id=execution_id)

    async def _session_target(self, session_id: str) -> Target | None:
        found = await self._db.call(store.session_node, session_id=session_id)
        if found is None:
            return None
        node_id, lost = found
        if lost or node_id in (None, self._cluster.node_id):
            return None  # served here: a lost session answers 410 after the caller's checks
        assert node_id is not None
        target = await self._live_node(node_id)
        if target is None:
            # Its shell state went with its replica: lost, never a fresh shell here. Recorded
            # now (the heartbeat loop would, a beat later) so that the answer here says so.
            await self._db.call(
                store.lose_session,
                session_id=session_id,
                node_id=node_id,
                now=datetime.now(UTC),
            )
        return target

    async def _live_node(self, node_id: str) -> Target | None:
        node = await self._cluster.node(node_id)
        if node is None or not self._cluster.is_alive(node):
            return None  # gone: what is left of its work is in the database, served here
        if not node.url:
            raise NodeUnreachableError(f"replica {node_id} has no SHELLGATE_NODE_URL")
        return Target(node_id, node.url, stopping=self._cluster.is_stopping(node))

    async def is_stopping(self, node_id: str) -> bool:
        """Whether the node's graceful stop has begun (its row says so)."""
        node = await self._cluster.node(node_id)
        return node is not None and self._cluster.is_stopping(node)

    async def until_recorded(self, execution_id: str) -> None:
        """Returns once the execution is no longer running or awaiting approval in the
        database, after the shutdown grace (the time a stopping owner takes at most to record
        its executions), or once this server starts stopping."""
        await self._until_ended(execution_id, self._settings.shutdown_grace)

    async def _log_is_here(self, execution_id: str) -> bool:
        directory = Path(self._settings.artifacts_dir)
        found = await anyio.to_thread.run_sync(existing_log_path, directory, execution_id)
        return found is not None

    # --- carrying it there --------------------------------------------------------------------

    def _headers(self, scope: Scope, *, websocket: bool) -> list[tuple[bytes, bytes]]:
        dropped = HOP_BY_HOP | (WEBSOCKET_HANDSHAKE if websocket else set())
        headers = [
            (name, value)
            for name, value in scope["headers"]
            if name.lower() not in dropped and name.lower() != INTERNAL_HEADER
        ]
        headers.append((INTERNAL_HEADER, self.secret))
        headers.append((FORWARDED_FROM_HEADER, self._cluster.node_id.encode()))
        return headers

    # --- calls made here on another replica's behalf (the MCP tools: one /mcp request can
    # reach any replica, while a session's shell lives on one) --------------------------------

    async def execution_owner(self, execution_id: str, action: str | None = None) -> Target | None:
        """The live replica an active execution runs on (or, for a log `action`, the one with
        its log) when it is another one (None: here)."""
        if not self.enabled:
            return None
        return await self._execution_target(execution_id, action)

    async def session_owner(self, session_id: str) -> Target | None:
        """The live replica a session's shell lives on when it is another one (None: here)."""
        if not self.enabled:
            return None
        return await self._session_target(session_id)

    async def call(
        self, target: Target, method: str, path: str, *, authorization: str, body: Any = None
    ) -> tuple[int, dict[str, str], bytes]:
        """A REST call to `target` as the caller (their own bearer token), marked as a
        forward so that the owner serves it itself: its status, headers and body."""
        client = await self._http()
        import httpx

        headers = {
            "Authorization": authorization,
            INTERNAL_HEADER.decode(): self.secret.decode(),
            FORWARDED_FROM_HEADER.decode(): self._cluster.node_id,
        }
        try:
            response = await client.request(method, target.url + path, headers=headers, json=body)
        except httpx.TransportError as error:
            raise NodeUnreachableError(
                f"replica {target.node_id} did not answer: {type(error).__name__}"
            ) from error
        return response.status_code, dict(response.headers), response.content

    async def forward_http(
        self, scope: Scope, send: Send, target: Target, body: bytes, *, last_try: bool = False
    ) -> bool:
        """Carry the request to `target` and relay its answer (True). False, having sent
        nothing, when the answer is to be made here without the owner (`answer_without_owner`):
        the owner of an execution did not answer and is stopping (any silent owner, for a
        long-poll), or answered a long-poll after its stop began (a wait the stop cut short).
        With `last_try`, an owner that did not answer is NodeUnreachableError."""
        client = await self._http()
        import httpx

        url = target.url + upstream_path(scope)
        request = client.build_request(
            scope["method"], url, headers=self._headers(scope, websocket=False), content=body
        )
        try:
            response = await client.send(request, stream=True)
        except httpx.TransportError as error:
            if (
                not last_try
                and target.execution_id is not None
                and (is_long_poll(scope) or await self.is_stopping(target.node_id))
            ):
                return False
            stopping = " (it is stopping)" if target.stopping else ""
            raise NodeUnreachableError(
                f"replica {target.node_id} did not answer{stopping}: {type(error).__name__}"
            ) from error
        if (
            not last_try
            and is_long_poll(scope)
            and target.execution_id is not None
            and await self.is_stopping(target.node_id)
        ):
            # Its stop ends waits at once with the record as it stood; the end is to come.
            await response.aclose()
            return False
        try:
            headers = [
                (name, value)
                for name, value in response.headers.raw
                if name.lower() not in HOP_BY_HOP
            ]
            await send(
                {"type": "http.response.start", "status": response.status_code, "headers": headers}
            )
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()
        return True

    async def forward_websocket(
        self, scope: Scope, receive: Receive, send: Send, target: Target
    ) -> None:
        # websockets' client: imported on a worker thread the first time, not on the loop.
        await anyio.to_thread.run_sync(importlib.import_module, "websockets.asyncio.client")
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidStatus

        url = "ws" + target.url.removeprefix("http") + upstream_path(scope)
        await receive()  # websocket.connect: the handshake is answered once the owner answers
        try:
            upstream = await connect(
                url,
                additional_headers=[
                    (name.decode("latin-1"), value.decode("latin-1"))
                    for name, value in self._headers(scope, websocket=True)
                ],
                subprotocols=scope.get("subprotocols") or None,
                open_timeout=CONNECT_SECONDS,
                # The owner pings this hop as its viewer; this hop pings the owner so that an
                # owner that hangs or whose host vanished (no FIN, no RST) ends the relay too.
                ping_interval=self._settings.ws_ping_seconds,
                ping_timeout=self._settings.ws_ping_seconds,
                max_size=None,
                compression=None,
            )
        except (OSError, TimeoutError, InvalidStatus) as error:
            await send({"type": "websocket.accept"})
            await send(
                {
                    "type": "websocket.close",
                    "code": CLOSE_TRY_AGAIN_LATER,
                    "reason": f"replica {target.node_id} did not answer",
                }
            )
            logger.warning("forwarding a stream to %s failed: %s", target.node_id, error)
            return
        await send({"type": "websocket.accept", "subprotocol": upstream.subprotocol})
        await _relay_websocket(upstream, receive, send, target)


async def _relay_websocket(
    upstream: ClientConnection, receive: Receive, send: Send, target: Target
) -> None:
    from websockets.exceptions import ConnectionClosed

    async def downstream_to_upstream() -> None:
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                await upstream.close()
                return
            if message.get("text") is not None:
                await upstream.send(message["text"])
            elif message.get("bytes") is not None:
                await upstream.send(message["bytes"])

    async def upstream_to_downstream() -> None:
        try:
            async for frame in upstream:
                if isinstance(frame, str):
                    await send({"type": "websocket.send", "text": frame})
                else:
                    await send({"type": "websocket.send", "bytes": bytes(frame)})
        except ConnectionClosed:
            pass
        if upstream.protocol.close_rcvd is None:
            # The owner went without a close frame (killed, crashed, its host gone): its
            # close code would be 1006, which no frame may carry. The viewer is told it is
            # temporary, as for an owner that does not answer at all.
            code, reason = CLOSE_TRY_AGAIN_LATER, f"replica {target.node_id} stopped answering"
        else:
            code, reason = upstream.close_code or 1000, upstream.close_reason or ""
        with contextlib.suppress(Exception):
            await send({"type": "websocket.close", "code": code, "reason": reason})

    tasks = [
        asyncio.ensure_future(downstream_to_upstream()),
        asyncio.ensure_future(upstream_to_downstream()),
    ]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await upstream.close()


class ForwardToOwner:
    """The middleware: refuse forged forwards, serve genuine ones here, forward what belongs
    to another replica."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        services = getattr(scope["app"].state, "services", None)
        if services is None:
            await self.app(scope, receive, send)
            return
        forwarder: Forwarder = services.forwarder
        marked = forwarder.is_forwarded(scope["headers"])
        if marked is False:
            await _refuse(
                scope, receive, send, 403, "forbidden", "invalid cluster forwarding header"
            )
            return
        if marked or not forwarder.enabled:
            await self.app(scope, receive, send)
            return
        body: bytes | None = None
        if scope["type"] == "http" and scope["method"] == "POST" and route_path(scope) == SUBMIT:
            # A submit goes where its session lives: the body says which.
            body = await read_body(receive)
            receive = replay_body(body, receive)
        try:
            target = await forwarder.target(scope, body)
            if target is None:
                await self.app(scope, receive, send)
            elif scope["type"] == "websocket":
                await forwarder.forward_websocket(scope, receive, send, target)
            else:
                if body is None:
                    body = await read_body(receive)
                if not await forwarder.forward_http(scope, send, target, body):
                    await self.answer_without_owner(scope, receive, send, forwarder, target, body)
        except NodeUnreachableError as error:
            await _refuse(scope, receive, send, 503, "node_unreachable", error.message)
        except (UnavailableError, StorageFullError) as error:
            # The database did not answer where the request belongs (or had no room to record
            # a lost session): the same answer the routes give, never a 500.
            status = 507 if isinstance(error, StorageFullError) else 503
            await _refuse(
                scope,
                receive,
                send,
                status,
                error.code,
                error.message,
                retry_after=error.retry_after_seconds,
            )

    async def answer_without_owner(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        forwarder: Forwarder,
        target: Target,
        body: bytes,
    ) -> None:
        """The owner of the execution stopped answering (Forwarder.forward_http). A long-poll
        is served here at once: it follows the record in the database. Anything else waits for
        the record's end (the stopping owner writes it), then goes where a finished
        execution's request goes: here, or, for a log on the owner's disk only, to the owner
        once more (503 `node_unreachable` if it does not answer)."""
        assert target.execution_id is not None
        if not is_long_poll(scope):
            await forwarder.until_recorded(target.execution_id)
            again = await forwarder.target(scope, body)
            if again is not None:
                await forwarder.forward_http(scope, send, again, body, last_try=True)
                return
        await self.app(scope, replay_body(body, receive), send)


def route_path(scope: Scope) -> str:
    path: str = scope["path"]
    root = scope.get("root_path") or ""
    return path[len(root) :] if root and path.startswith(root) else path


def upstream_path(scope: Scope) -> str:
    """The path as the owner expects it: its own uvicorn adds its root path again."""
    raw = scope.get("raw_path")
    path = raw.decode("latin-1") if raw else str(scope["path"])
    root = scope.get("root_path") or ""
    if root and path.startswith(root):
        path = path[len(root) :]
    query = scope.get("query_string") or b""
    return path + ("?" + query.decode("latin-1") if query else "")


def is_long_poll(scope: Scope) -> bool:
    """A read of an execution's record (forwarded only with `?wait=`)."""
    if scope.get("method") != "GET":
        return False
    match = _EXECUTION_PATH.match(route_path(scope))
    return match is not None and match.group(2) is None


def _waits(scope: Scope) -> bool:
    query = (scope.get("query_string") or b"").decode("latin-1")
    for part in query.split("&"):
        name, _, value = part.partition("=")
        if name == "wait" and value not in ("", "0"):
            return True
    return False


def _session_of(body: bytes) -> str | None:
    try:
        document = json.loads(body)
    except ValueError:
        return None  # the route answers the bad body itself
    session = document.get("session") if isinstance(document, dict) else None
    return session if isinstance(session, str) else None


async def read_body(receive: Receive) -> bytes:
    """The whole body: a submit's to find its session, or one carried to the owner. Its size is
    bounded before it gets here (`LimitRequestBodies`, outside this middleware); keeping only a
    part would replay or forward a body cut short."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _refuse(
    scope: Scope,
    receive: Receive,
    send: Send,
    status: int,
    code: str,
    message: str,
    *,
    retry_after: int = 5,
) -> None:
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        close = CLOSE_FORBIDDEN if status == 403 else CLOSE_TRY_AGAIN_LATER
        await send({"type": "websocket.close", "code": close, "reason": message})
        return
    body = json.dumps(
        {
            "error": {
                "code": code,
                "message": message,
                "details": {},
                "request_id": current_request_id(),
            }
        }
    ).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status in (503, 507):
        headers.append((b"retry-after", str(retry_after).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
