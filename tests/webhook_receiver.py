"""A real HTTP receiver on loopback for webhook tests: it records every request it gets and
answers each with the next scripted reply (a status, a redirect, or a hang)."""

from __future__ import annotations

import contextlib
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    port: int
    # Replies in order; once used up, `default`. An int is a status; ("hang", s) sleeps s
    # seconds before answering 200; ("hold", event) answers 200 once the threading.Event is
    # set; ("redirect", location) answers 302.
    script: list[object] = field(default_factory=list)
    default: object = 200
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    scheme: str = "http"

    def url(self, path: str = "/hook", host: str = "127.0.0.1") -> str:
        return f"{self.scheme}://{host}:{self.port}{path}"

    def next_reply(self) -> object:
        with self.lock:
            return self.script.pop(0) if self.script else self.default

    def posts(self) -> list[Received]:
        with self.lock:
            return list(self.received)


@contextlib.contextmanager
def webhook_receiver(
    script: list[object] | None = None,
    default: object = 200,
    tls: tuple[Path, Path] | None = None,
    port: int = 0,
) -> Iterator[Receiver]:
    """`tls`: (certificate, key) PEM files to serve https with; `port`: 0 for any free one."""
    receiver = Receiver(port=0, script=list(script or []), default=default)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            with receiver.lock:
                receiver.received.append(
                    Received(
                        "POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body
                    )
                )
            reply = receiver.next_reply()
            if isinstance(reply, tuple) and reply[0] == "hang":
                time.sleep(float(reply[1]))
                reply = 200
            if isinstance(reply, tuple) and reply[0] == "hold":
                reply[1].wait(60)
                reply = 200
            if isinstance(reply, tuple) and reply[0] == "redirect":
                self.send_response(302)
                self.send_header("Location", str(reply[1]))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            assert isinstance(reply, int)
            payload = b"ok"
            try:
                self.send_response(reply)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except OSError:
                pass  # the sender gave up (a timeout test)

        def do_GET(self) -> None:
            with receiver.lock:
                receiver.received.append(
                    Received("GET", self.path, {k.lower(): v for k, v in self.headers.items()}, b"")
                )
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(tls[0]), str(tls[1]))
        server.socket = context.wrap_socket(server.socket, server_side=True)
        receiver.scheme = "https"
    receiver.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
