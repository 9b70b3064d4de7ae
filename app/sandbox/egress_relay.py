"""Runs inside a sandbox whose network is a host list, before the command: the sandbox has a
network namespace of its own with loopback only, so its one way out is the server's proxy,
reached through a Unix socket bound into the sandbox (app/sandbox/egress.py). This listens on
the sandbox's loopback where `HTTP_PROXY` points, hands each connection to that socket, and
execs the command in its own place (its pid, its exit status, its signals are the command's).

    python -I -S -c <this file's text> SOCKET PORT COMMAND...

The relay itself is a daemon in the sandbox: forked twice, so the command never has a child it
did not make (a shell's `wait` would reap it), in a session of its own, so a TERM to the
command's group leaves the command's way out open through its grace, with its standard streams
on /dev/null, so the command's output ends when the command's does. It ends with the sandbox:
the kernel kills every process of a PID namespace when its init (bwrap's) ends with the
command. It runs on the interpreter's C modules alone (`_socket`, `_thread`; `-I -S`: neither
the server's packages nor the user's site): `socket` and `threading` would double its start,
≈ 13 ms more before every such command (`socket` builds its enums at import).
"""

from __future__ import annotations

import _socket
import _thread
import os
import sys

CHUNK = 65536


def pump(source: _socket.socket, sink: _socket.socket) -> None:
    """Copy `source` to `sink` until EOF, then pass the EOF on (a half-close); on an error,
    end both ways."""
    try:
        while data := source.recv(CHUNK):
            sink.sendall(data)
        sink.shutdown(_socket.SHUT_WR)
    except OSError:
        for end in (source, sink):
            try:  # noqa: SIM105 (contextlib would be one more import at every start)
                end.shutdown(_socket.SHUT_RDWR)
            except OSError:
                pass


def pump_then_release(source: _socket.socket, sink: _socket.socket, done: _thread.LockType) -> None:
    try:
        pump(source, sink)
    finally:
        done.release()


def relay(client: _socket.socket, proxy_path: str) -> None:
    """One connection: to the proxy's socket, both ways until both ends are done."""
    try:
        upstream = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            upstream.connect(proxy_path)
        except OSError:
            return  # the proxy is gone (the execution is ending): the client sees the close
        done = _thread.allocate_lock()
        done.acquire()
        _thread.start_new_thread(pump_then_release, (upstream, client, done))
        pump(client, upstream)
        done.acquire()
        upstream.close()
    finally:
        client.close()


def serve(listener: _socket.socket, proxy_path: str) -> None:
    while True:
        accepted, _ = listener._accept()  # type: ignore[attr-defined]  # (`accept` is socket.py's)
        client = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM, 0, accepted)
        _thread.start_new_thread(relay, (client, proxy_path))


def main() -> None:
    proxy_path, port, command = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    listener.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
    # Listening before the command starts: its first connection cannot come too early.
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
    middle = os.fork()
    if middle == 0:
        if os.fork() != 0:
            os._exit(0)
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for stream in (0, 1, 2):
            os.dup2(null, stream)
        try:
            serve(listener, proxy_path)
        finally:
            os._exit(0)
    listener.close()
    os.waitpid(middle, 0)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
