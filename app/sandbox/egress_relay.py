"""Runs inside a sandbox whose network is a host list, before the command: the sandbox has a
network namespace of its own with loopback only, so its one way out is the server's proxy,
reached through a Unix socket bound into the sandbox (app/sandbox/egress.py). This listens on
the sandbox's loopback where `HTTP_PROXY` points, hands each connection to that socket, and
execs the command in its own place (its pid, its exit status, its signals are the command's).

    python -I -S -c <this file's text> SOCKET PORT COMMAND...

The relay itself is a daemon in the sandbox: forked twice, so the command never has a child it
did not make (a shell's `wait` would reap it), with its standard streams on /dev/null, so the
command's output ends when the command's does. It ends with the sandbox: the kernel kills
every process of a PID namespace when its init (bwrap's) ends with the command. It runs with
the stdlib only (`-I -S`: neither the server's packages nor the user's site), and starts in the
milliseconds a bare interpreter takes.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading

CHUNK = 65536


def pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy `source` to `sink` until EOF, then pass the EOF on (a half-close)."""
    try:
        while data := source.recv(CHUNK):
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)


def relay(client: socket.socket, proxy_path: str) -> None:
    with client:
        try:
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(proxy_path)
        except OSError:
            return  # the proxy is gone (the execution is ending): the client sees the close
        with upstream:
            back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
            back.start()
            pump(client, upstream)
            back.join()


def serve(listener: socket.socket, proxy_path: str) -> None:
    while True:
        client, _ = listener.accept()
        threading.Thread(target=relay, args=(client, proxy_path), daemon=True).start()


def main() -> None:
    proxy_path, port, command = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Listening before the command starts: its first connection cannot come too early.
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
    middle = os.fork()
    if middle == 0:
        if os.fork() != 0:
            os._exit(0)
        os.setsid()  # out of the command's group: a TERM to the group is the command's alone
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
