"""A loopback TCP proxy the test can cut and restore: the database "stops" for the server
without stopping the machine's shared PostgreSQL."""

from __future__ import annotations

import contextlib
import socket
import threading


class CuttableProxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._silent = False
        self._frozen = threading.Event()
        self.accepted = 0  # connections accepted and piped through, over all starts
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = int(probe.getsockname()[1])
        probe.close()

    def start(self, *, silent: bool = False) -> None:
        self._silent = silent
        self._frozen.clear()
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        """Refuse new connections and reset the open ones."""
        with self._lock:
            if self._listener is not None:
                # shutdown() wakes the thread blocked in accept(); close() alone would not,
                # and the socket would go on listening.
                with contextlib.suppress(OSError):
                    self._listener.shutdown(socket.SHUT_RDWR)
                self._listener.close()
                self._listener = None
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._sockets.clear()

    def freeze(self) -> None:
        """Keep every connection open and forward nothing more, new ones included: a network
        partition, where no reset ever tells the client (only a timeout of its own could)."""
        self._frozen.set()
        self._silent = True

    def blackhole(self) -> None:
        """Accept connections and never answer: a server that is unreachable, not down."""
        self.cut()
        self.start(silent=True)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            if self._silent:
                with self._lock:
                    self._sockets.add(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets.update((client, upstream))
                self.accepted += 1
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if not self._frozen.is_set():
                    sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
