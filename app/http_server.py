"""How the HTTP server (uvicorn) is run: the options `shellgate serve` and the tests share, and
a protocol that logs every connection the server drops.

Connections uvicorn closes on its own are otherwise silent: an idle keep-alive connection
timing out, a request it cannot parse, the connections still open at shutdown. A client that
reuses a keep-alive connection just as the server closes it sees a read error and no response;
the log line is how the server side of that shows up.
"""

from __future__ import annotations

import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.config import Settings

logger = logging.getLogger("shellgate.http")

# How long a thread may hold the interpreter while another waits for it (Python's default is
# 5 ms). The event loop waits that long for each wake-up whenever a worker thread (the shared
# output worker cleaning binary output, the database's) is busy; a shorter interval keeps
# requests fast under that load.
SWITCH_INTERVAL_SECONDS = 0.001


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
    }
