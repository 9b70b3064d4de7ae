"""terminado as a peer: the smallest tornado app serving its TermSocket, run by the peers'
virtualenv (`bench/.peers-venv/bin/python -m bench.terminado_app PORT` from the repo root),
bound to loopback.

Each WebSocket path gets its own terminal per connection (UniqueTermManager), running one
program: `/echo` a raw `cat` for keystroke echo, `/stream/<bytes>` a generator of that many
bytes for throughput. `/healthz` answers 200 once the server listens.
"""

from __future__ import annotations

import sys

import tornado.ioloop
import tornado.web
from terminado import TermSocket, UniqueTermManager

from bench.programs import ECHO_PROGRAM, stream_program


class Healthz(tornado.web.RequestHandler):
    def get(self) -> None:
        self.write("ok")


class StreamSocket(TermSocket):
    """A TermSocket whose terminal runs the stream program of the size in the URL."""

    def open(self, size: str) -> None:  # type: ignore[override]
        self.term_manager.shell_command = ["bash", "-c", stream_program(int(size))]
        super().open()


def main() -> None:
    port = int(sys.argv[1])
    echo = UniqueTermManager(shell_command=["bash", "-c", ECHO_PROGRAM])
    stream = UniqueTermManager(shell_command=["true"])
    app = tornado.web.Application(
        [
            (r"/healthz", Healthz),
            (r"/echo", TermSocket, {"term_manager": echo}),
            (r"/stream/(\d+)", StreamSocket, {"term_manager": stream}),
        ],
        websocket_max_message_size=1 << 30,
    )
    app.listen(port, address="127.0.0.1")
    tornado.ioloop.IOLoop.current().start()


if __name__ == "__main__":
    main()
