"""How the HTTP server (uvicorn) is run: the options `shellgate serve` and the tests share, and
a protocol that logs every connection the server drops.

Connections uvicorn closes on its own are otherwise silent: an idle keep-alive connection
timing out, a request it cannot parse, the connections still open at shutdown. A client that
reuses a keep-alive connection just as the server closes it sees a read error and no response;
the log line is how the server side of that shows up.
"""

from __future__ import annotations

import ctypes
import logging
import platform
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.config import Settings
from app.strict_json import json_body_limit

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


class DropLoggingHttpProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol, logging each connection it closes by its own decision."""

    def _peer(self) -> str:
        return f"{self.client[0]}:{self.client[1]}" if self.client else "unknown peer"

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
        if self.cycle is None or self.cycle.response_complete:
            logger.info("closing idle connection from %s: the server is stopping", self._peer())
        super().shutdown()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.cycle is not None and not self.cycle.response_complete:
            logger.info(
                "connection from %s lost before its response was complete: %s",
                self._peer(),
                exc or "closed by the peer",
            )
        super().connection_lost(exc)


def server_options(settings: Settings) -> dict[str, Any]:
    """uvicorn options from the settings, besides the app, host, port and log level."""
    return {
        "http": DropLoggingHttpProtocol,
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
