"""How the HTTP server (uvicorn) is run: the options `shellgate serve` and the tests share, and
a protocol that logs every connection the server drops.

Connections uvicorn closes on its own are otherwise silent: an idle keep-alive connection
timing out, a request it cannot parse, the connections still open at shutdown. A client that
reuses a keep-alive connection just as the server closes it sees a read error and no response;
the log line is how the server side of that shows up.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import platform
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.core.config import Settings
from app.core.strict_json import json_body_limit

logger = logging.getLogger("shellgate.http")

# How long a thread may hold the interpreter while another waits for it (Python's default is
# 5 ms). The event loop waits that long for each wake-up whenever a worker thread (the shared
# output worker cleaning binary output, the database's) is busy; a shorter interval keeps
# requests fast under that load.
SWITCH_INTERVAL_SECONDS = 0.001

# glibc gives each thread that allocates while another holds the main heap a heap (arena) of
# its own, up to 8 per core, and keeps what is freed in each: the server's pool threads (the
# database's, anyio's, the output worker) left RSS ×1.2 higher after a soak than before it,
# with no Python object behind it (bench/README.md, "Soak"). Two arenas bound that; the
# threads allocate mostly under the interpreter lock, so they seldom wait for one another.
MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # mallopt's parameter number (malloc.h)


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Cap glibc's arenas for this process only (before its threads start; children exec a
    new program and are not affected). False where the C library is not glibc."""
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(None)
        return bool(libc.mallopt(_M_ARENA_MAX, arenas))
    except (OSError, AttributeError):
        return False


# A request's head (request line and headers) is at most this large, and must be complete this
# long after the connection opened or the request's first byte came. uvicorn bounds neither:
# one 64 MiB header took 2.5 s of the event loop to gather (the parser appends it piece by
# piece) and was answered 200, and a connection that sends half a head and then a byte every
# few seconds stayed open for good (RELIABILITY.md, "One request against all the others").
# (The time is SHELLGATE_HEAD_TIMEOUT_SECONDS: `server_options` makes the class that has it.)
MAX_HEAD_BYTES = 64 * 1024
# The scope extension each request gets, `{"cut": <callable>}`: close the connection after what
# the response sent, left incomplete on purpose (`_cut_connection`).
CUT_CONNECTION = "shellgate.cut_connection"
REFUSED_LINGER_SECONDS = 2.0
# At the stop, how long a connection accepted before it may take to bring its first request.
LATE_REQUEST_SECONDS = 2.0


class DropLoggingHttpProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol, logging each connection it closes by its own decision, and
    bounding each request's head in size (431) and in time (the connection is closed)."""

    head_timeout: float = 30.0
    _in_head = True
    _head_bytes = 0
    _head_timer: asyncio.TimerHandle | None = None
    _refused = False
    _cut = False
    _stopping = False

    def _peer(self) -> str:
        return f"{self.client[0]}:{self.client[1]}" if self.client else "unknown peer"

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._start_head()

    def _start_head(self) -> None:
        self._in_head, self._head_bytes = True, 0
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.head_timeout, self._head_too_slow)

    def _end_head(self) -> None:
        self._in_head = False
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._head_timer is None:  # the next request on a kept-alive connection
            self._start_head()

    def on_headers_complete(self) -> None:
        self._end_head()
        # Read by the request's cycle, which uvicorn makes with this scope right now.
        extensions = self.scope.setdefault("extensions", {})
        extensions[CUT_CONNECTION] = {"cut": self._cut_connection}
        super().on_headers_complete()
        if self._stopping and self.cycle is not None:
            self.cycle.keep_alive = False  # the request that came after the stop: the last

    def _cut_connection(self) -> None:
        """End the connection after what the response sent, short of the `Content-Length` it
        announced: the app cannot send the rest (a file that shrank while it was sent,
        `app/api/file_response.py`), and a connection closed early is how HTTP/1.1 tells the
        client its body is short. uvicorn's own way is `RuntimeError: Response content shorter
        than Content-Length`, logged with its traceback. Its request counts as disconnected,
        so that the app returning without completing the response is not logged as an error
        either; the app has logged why."""
        self._cut = True
        if self.cycle is not None:
            self.cycle.disconnected = True
        self.transport.close()  # after what is buffered is written

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # the rest of a refused head, read and dropped until the close
        if not self._in_head:
            super().data_received(data)
            return
        room = MAX_HEAD_BYTES - self._head_bytes
        self._head_bytes += min(len(data), room)
        super().data_received(data[:room])
        if len(data) <= room:
            return
        if self._in_head:
            self._refuse_head()
            return
        # The head ended within the room: the rest is the body (or a pipelined request), for
        # whichever protocol the transport has now (a WebSocket after an upgrade).
        protocol = self.transport.get_protocol()
        if not self.transport.is_closing():
            protocol.data_received(data[room:])

    def _refuse_head(self) -> None:
        logger.warning(
            "closing connection from %s: request head over %d bytes", self._peer(), MAX_HEAD_BYTES
        )
        message = f"The request line and headers are larger than {MAX_HEAD_BYTES} bytes."
        self.transport.write(
            b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
            b"content-type: text/plain; charset=utf-8\r\n"
            + f"content-length: {len(message)}\r\n".encode()
            + b"connection: close\r\n\r\n"
            + message.encode()
        )
        self._end_head()
        # Closing with the client's bytes unread would reset the connection, and the client
        # could lose the 431 with it: end our side, drop what still comes for a moment, close.
        self._refused = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(REFUSED_LINGER_SECONDS, self.transport.close)

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self._in_head and not self.transport.is_closing():
            logger.info(
                "closing connection from %s: no complete request head within %g s",
                self._peer(),
                self.head_timeout,
            )
            self.transport.close()

    def timeout_keep_alive_handler(self) -> None:
        if not self.transport.is_closing():
            logger.info(
                "closing idle keep-alive connection from %s after %d s",
                self._peer(),
                self.timeout_keep_alive,
            )
        super().timeout_keep_alive_handler()

    def send_400_response(self, msg: str) -> None:
        logger.warning("closing connection from %s: %s", self._peer(), msg)
        super().send_400_response(msg)

    def shutdown(self) -> None:
        self._stopping = True
        if self.cycle is None and not self.transport.is_closing():
            # Accepted before the stop, its first request not yet here: a gateway sends it
            # right after connecting, and closing now would drop it unread, which the gateway
            # cannot tell from a request that ran (a POST is not retried elsewhere). It is
            # answered instead (new work: 503 `shutting_down`, which a gateway does retry
            # elsewhere), then the connection closes; one that brings nothing is closed soon.
            self.loop.call_later(LATE_REQUEST_SECONDS, self._no_late_request)
            return
        if self.cycle is not None and self.cycle.response_complete:
            logger.info("closing idle connection from %s: the server is stopping", self._peer())
        super().shutdown()

    def _no_late_request(self) -> None:
        if self.cycle is None and not self.transport.is_closing():
            logger.info(
                "closing connection from %s: no request within %g s of the stop",
                self._peer(),
                LATE_REQUEST_SECONDS,
            )
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._end_head()
        if self.cycle is not None and not self.cycle.response_complete and not self._cut:
            logger.info(
                "connection from %s lost before its response was complete: %s",
                self._peer(),
                exc or "closed by the peer",
            )
        super().connection_lost(exc)


def server_options(settings: Settings) -> dict[str, Any]:
    """uvicorn options from the settings, besides the app, host, port and log level."""
    protocol = type(
        "HttpProtocol", (DropLoggingHttpProtocol,), {"head_timeout": settings.head_timeout_seconds}
    )
    return {
        "http": protocol,
        "timeout_keep_alive": settings.keepalive_seconds,
        "root_path": settings.root_path,
        "proxy_headers": True,
        "forwarded_allow_ips": settings.forwarded_allow_ips,
        "ws_ping_interval": settings.ws_ping_seconds,
        "ws_ping_timeout": settings.ws_ping_seconds,
        "ws_per_message_deflate": settings.ws_compression,
        # A client frame is parsed on the event loop, and uvicorn holds up to 32 of them per
        # connection while the app is busy: its 16 MiB default cost 3.4 s of parsing and
        # 270 MiB (RELIABILITY.md, "One request against all the others"). Larger: close 1009.
        "ws_max_size": json_body_limit(settings.max_command_bytes),
    }
