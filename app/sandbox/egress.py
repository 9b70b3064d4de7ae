"""The server's HTTP proxy for commands whose sandbox network is a list of `host[:port]` globs
(docs/sandbox.md): one Unix socket per execution, bound into its sandbox, where every
connection asks for one destination (`CONNECT host:port`, or a plain `http://` request in
absolute form) and is tunnelled there only when the execution's list admits it.

The sandbox has no route out of its own network namespace, so this proxy is the only way out:
the destination is decided once, from the request head, and every later byte of that
connection goes to it (a keep-alive request naming another host still reaches the first).
A host that only a wildcard admits must not resolve to a private address: a name the command's
author does not control could otherwise point `*.example.com` at the server's own network.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from app.core.globs import compile_glob
from app.process.descriptor_limit import current_soft_limit

logger = logging.getLogger("shellgate.egress")

HEAD_MAX_BYTES = 64 * 1024
HEAD_TIMEOUT = 30.0  # seconds for the whole request head; then the connection is dropped
CONNECT_TIMEOUT = 10.0  # seconds to resolve and connect to the destination
CONNECTIONS_PER_KEY = 64
# Of the server's open-files limit, the share all commands' proxy connections may hold together
# (two descriptors each: the command's side and the destination's): beyond it a connection is
# refused (503), so that commands holding connections open cannot leave the server without
# descriptors for its spawns, logs and clients (app/process/descriptor_limit.py).
DESCRIPTOR_SHARE = 4
REFUSED_KEPT = 10
PUMP_CHUNK = 64 * 1024
# A glob with no port: the ports of the web, which is what a host list is mostly written for.
DEFAULT_PORTS = (80, 443)
# sockaddr_un.sun_path is 108 bytes with its NUL.
UNIX_PATH_MAX = 107
# Names are looked up on threads of the proxy's own, at most LOOKUPS_PER_KEY at once for one
# command: the loop's resolver (libuv's four threads under uvloop) also serves the server's
# webhooks, OIDC keys and cluster calls, and a command asking for names whose DNS answers
# slowly (a wildcard admits the command author's own domain) held every one of them.
RESOLVER_THREADS = 8
LOOKUPS_PER_KEY = 2

# socket.getaddrinfo's shape: (host, port, family, type) -> its list of results.
Resolver = Callable[..., list[tuple[Any, ...]]]

_KEY = re.compile(r"[A-Za-z0-9_-]+")
_REQUEST_LINE = re.compile(r"([!#$%&'*+.^_`|~0-9A-Za-z-]+) (\S+) HTTP/1\.[01]")
# A name or an IPv4 address, and a port: no `[...]` IPv6 literal, no userinfo.
_AUTHORITY = re.compile(r"([A-Za-z0-9._-]{1,253})(?::([0-9]{1,5}))?")
_ABSOLUTE_HTTP = re.compile(r"http://([^/?#]*)(.*)", re.IGNORECASE)


def admits(allowed: Sequence[str], host: str, port: int) -> str | None:
    """The glob of `allowed` that admits host:port, or None. The host is compared lower-cased,
    as text; a glob with no port admits ports 80 and 443 only, `:*` any port, `:N` exactly N.
    One naming the host exactly comes before any wildcard (it may reach a private address)."""
    host = host.lower()
    admitting = [glob for glob in allowed if _admits_one(glob.lower(), host, port)]
    exact = [glob for glob in admitting if names_exactly(glob, host)]
    chosen = exact or admitting
    return chosen[0] if chosen else None


def _admits_one(glob: str, host: str, port: int) -> bool:
    host_glob, _, port_glob = glob.partition(":")
    if not port_glob:
        port_admitted = port in DEFAULT_PORTS
    else:
        port_admitted = port_glob == "*" or (port_glob.isdigit() and int(port_glob) == port)
    return port_admitted and compile_glob(host_glob)(host)


def names_exactly(glob: str, host: str) -> bool:
    """Whether `glob` is the literal `host` (any port): the admin named this very host, so it may
    be a private one."""
    host_glob = glob.lower().partition(":")[0]
    return "*" not in host_glob and host_glob == host.lower()


def is_private(address: str) -> bool:
    """Whether a resolved address is anything but the public internet: loopback, private,
    link-local, multicast, unspecified, reserved or shared (carrier-grade NAT)."""
    ip = ipaddress.ip_address(address.partition("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return (
        ip.is_loopback
        or ip.is_private
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_unspecified
        or ip.is_reserved
        or not ip.is_global
    )


class ProxyRefusal(Exception):
    """An answer other than a tunnel: the status, its reason phrase and a one-line message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message

    def response(self) -> bytes:
        body = f"shellgate egress proxy: {self.message}\n".encode()
        head = (
            f"HTTP/1.1 {self.status} {self.reason}\r\n"
            "Content-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        )
        return head.encode() + body


def _bad_request(message: str) -> ProxyRefusal:
    return ProxyRefusal(400, "Bad Request", message)


@dataclass
class _Destination:
    host: str
    port: int
    tunnel: bool  # CONNECT: answer 200 and forward what follows the head; else forward the head


@dataclass
class _Listener:
    """One key's socket: what it admits, what it refused, the connections it serves."""

    key: str
    path: str
    allowed: tuple[str, ...]
    server: asyncio.AbstractServer | None = None
    refused: list[str] = field(default_factory=list)
    refusals_unlisted: bool = False  # a refusal beyond REFUSED_KEPT was seen (and logged once)
    connections: set[asyncio.Task[None]] = field(default_factory=set)
    closed: bool = False
    lookups: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(LOOKUPS_PER_KEY))


def read_destination(head: bytes) -> _Destination:
    """The destination a request head asks for; a ProxyRefusal (400) for anything else."""
    first_line = head.split(b"\n", 1)[0].rstrip(b"\r").decode("latin-1")
    line = _REQUEST_LINE.fullmatch(first_line)
    if line is None:
        raise _bad_request("the request line is not `METHOD target HTTP/1.x`")
    method, target = line.group(1), line.group(2)
    if method.upper() == "CONNECT":
        authority = _AUTHORITY.fullmatch(target)
        if authority is None or authority.group(2) is None:
            raise _bad_request("CONNECT takes `host:port` (a name or an IPv4 address)")
        return _Destination(authority.group(1).lower(), _port(authority.group(2)), tunnel=True)
    if target.lower().startswith("https://"):
        raise _bad_request("an https:// URL goes through CONNECT (set HTTPS_PROXY)")
    absolute = _ABSOLUTE_HTTP.fullmatch(target)
    if absolute is None:
        raise _bad_request("a proxied request names its URL in full (http://host/path)")
    authority = _AUTHORITY.fullmatch(absolute.group(1))
    if authority is None:
        raise _bad_request("the URL's host must be a name or an IPv4 address, with no user")
    port = _port(authority.group(2)) if authority.group(2) is not None else 80
    return _Destination(authority.group(1).lower(), port, tunnel=False)


def _port(text: str) -> int:
    port = int(text)
    if not 1 <= port <= 65535:
        raise _bad_request("the port must be within 1..65535")
    return port


async def read_head(reader: asyncio.StreamReader) -> tuple[bytes, bytes] | None:
    """The request head through its blank line and whatever arrived after it; None when the
    client closed first; a ProxyRefusal (431) past HEAD_MAX_BYTES."""
    buffer = bytearray()
    searched = 0
    while True:
        end = _head_end(buffer, searched)
        if end is not None:
            if end > HEAD_MAX_BYTES:
                break
            return bytes(buffer[:end]), bytes(buffer[end:])
        if len(buffer) > HEAD_MAX_BYTES:
            break
        searched = max(0, len(buffer) - 3)  # a terminator may straddle two reads
        chunk = await reader.read(PUMP_CHUNK)
        if not chunk:
            return None
        buffer += chunk
    raise ProxyRefusal(
        431,
        "Request Header Fields Too Large",
        f"the request head is over {HEAD_MAX_BYTES // 1024} KiB",
    )


def _head_end(buffer: bytearray, start: int) -> int | None:
    """Where the head ends (after its blank line: CRLF CRLF, or LF LF from a lax client)."""
    ends = [
        found + len(mark)
        for mark in (b"\r\n\r\n", b"\n\n")
        if (found := buffer.find(mark, start)) >= 0
    ]
    return min(ends) if ends else None


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> bool:
    """Copy one direction until its end of file, then half-close the other side; True on a clean
    end, False when either side failed (the whole tunnel ends then)."""
    try:
        while data := await source.read(PUMP_CHUNK):
            sink.write(data)
            await sink.drain()  # bounded memory: wait for a slow reader
        if sink.can_write_eof():
            sink.write_eof()
        return True
    except OSError as error:
        logger.debug("egress relay ended: %s", error)
        return False


async def relay(
    client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    target: tuple[asyncio.StreamReader, asyncio.StreamWriter],
) -> None:
    """Bytes both ways until both directions ended or one failed."""
    upstream = asyncio.create_task(_pump(client[0], target[1]))
    downstream = asyncio.create_task(_pump(target[0], client[1]))
    try:
        for finished in asyncio.as_completed((upstream, downstream)):
            if not await finished:
                break
    finally:
        upstream.cancel()
        downstream.cancel()
        await asyncio.gather(upstream, downstream, return_exceptions=True)


class EgressProxy:
    """The server's HTTP proxy for commands whose sandbox network is a host list."""

    def __init__(
        self, connections_cap: int | None = None, resolve: Resolver = socket.getaddrinfo
    ) -> None:
        """`connections_cap`: the connections all keys may hold open together; by default a
        DESCRIPTOR_SHARE-th of this process's open-files limit, two descriptors each.
        `resolve`: how a name is looked up (blocking, on the proxy's threads)."""
        self._resolve = resolve
        self._resolver_threads = ThreadPoolExecutor(
            RESOLVER_THREADS, thread_name_prefix="shellgate-egress-dns"
        )
        self._directory: str | None = None
        self._listeners: dict[str, _Listener] = {}
        self._sockets_made = 0
        if connections_cap is None:
            connections_cap = max(1, current_soft_limit() // DESCRIPTOR_SHARE // 2)
        self.connections_cap = connections_cap
        self._connections_open = 0

    async def open(self, key: str, allowed: Sequence[str]) -> str:
        """Listen for `key` (an execution id) on a Unix socket of its own, admitting the
        `host[:port]` globs of `allowed`; return the socket's path. The socket (mode 0600) sits in
        this proxy's private directory (mode 0700); a key already open is a ValueError."""
        if not _KEY.fullmatch(key):
            raise ValueError(f"egress key {key!r} must be letters, digits, `_` and `-`")
        if key in self._listeners:
            raise ValueError(f"egress key {key!r} is already open")
        # A counter, not the key: a socket's path must stay short whatever the ids look like.
        self._sockets_made += 1
        path = os.path.join(self._socket_directory(), f"{self._sockets_made}.sock")
        if len(os.fsencode(path)) > UNIX_PATH_MAX:
            raise OSError(f"egress socket path {path!r} is too long for a Unix socket")
        listener = _Listener(key, path, tuple(allowed))
        self._listeners[key] = listener

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._serve(listener, reader, writer)

        try:
            listener.server = await asyncio.start_unix_server(serve, path=path)
            os.chmod(path, 0o600)
        except BaseException:
            del self._listeners[key]
            if listener.server is not None:
                listener.server.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            raise
        return path

    @property
    def connections_open(self) -> int:
        """Connections open now, all keys together."""
        return self._connections_open

    def _socket_directory(self) -> str:
        """The private directory (mode 0700), made again should a cleaner of /tmp remove it
        under a server that runs for weeks."""
        if self._directory is None or not os.path.isdir(self._directory):
            self._directory = tempfile.mkdtemp(prefix="sg-egress-")
        return self._directory

    def refused(self, key: str) -> list[str]:
        """The `host:port`s refused for `key` so far (the first 10 distinct, in order); [] for a
        key not open."""
        listener = self._listeners.get(key)
        return list(listener.refused) if listener else []

    async def close(self, key: str) -> list[str]:
        """Stop listening for `key`, remove its socket file and cut its open tunnels; return what
        it refused. Idempotent: a key not open (or closed already) returns []."""
        listener = self._listeners.pop(key, None)
        if listener is None:
            return []
        listener.closed = True
        if listener.server is not None:
            listener.server.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(listener.path)
        connections = list(listener.connections)
        for task in connections:
            task.cancel()
        await asyncio.gather(*connections, return_exceptions=True)
        if listener.server is not None:
            await listener.server.wait_closed()
        return list(listener.refused)

    async def aclose(self) -> None:
        """Close every key and remove the directory (server shutdown)."""
        for key in list(self._listeners):
            await self.close(key)
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None
        # A lookup still waiting for its DNS ends on its own; nobody waits for it.
        self._resolver_threads.shutdown(wait=False, cancel_futures=True)

    async def _serve(
        self, listener: _Listener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """One connection, start to end; nothing raised here leaves it (the loop would log a
        traceback for what is only a client going away)."""
        task = asyncio.current_task()
        if listener.closed or task is None:
            writer.transport.abort()
            return
        cut = counted = False
        try:
            if len(listener.connections) >= CONNECTIONS_PER_KEY:
                raise ProxyRefusal(
                    503,
                    "Service Unavailable",
                    f"this command has {CONNECTIONS_PER_KEY} connections open already",
                )
            if self._connections_open >= self.connections_cap:
                raise ProxyRefusal(
                    503,
                    "Service Unavailable",
                    f"the server's proxy has {self.connections_cap} connections open for all "
                    "commands already; retry once some close",
                )
            listener.connections.add(task)
            self._connections_open += 1
            counted = True
            await self._proxy(listener, reader, writer)
        except ProxyRefusal as refusal:
            with contextlib.suppress(OSError):
                writer.write(refusal.response())
                await writer.drain()
        except asyncio.CancelledError:
            # close(key): the tunnel ends now, whatever is still buffered. Not raised on: the
            # streams' callback of Python 3.11 logs a cancelled connection task as an error.
            cut = True
        except OSError as error:
            logger.debug("egress connection for %s ended: %s", listener.key, error)
        except Exception:
            logger.info("egress connection for %s failed", listener.key, exc_info=True)
        finally:
            listener.connections.discard(task)
            if counted:
                self._connections_open -= 1
            if cut:
                writer.transport.abort()
            else:
                writer.close()

    async def _proxy(
        self, listener: _Listener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            async with asyncio.timeout(HEAD_TIMEOUT):
                received = await read_head(reader)
        except TimeoutError:
            logger.debug("egress connection for %s sent no request head in time", listener.key)
            return
        if received is None:
            return
        head, rest = received
        destination = read_destination(head)
        target = await self._connect(listener, destination)
        target_writer = target[1]
        try:
            if destination.tunnel:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
                target_writer.write(rest)
            else:
                target_writer.write(head + rest)
            await target_writer.drain()
            await relay((reader, writer), target)
        except asyncio.CancelledError:
            target_writer.transport.abort()
            raise
        finally:
            target_writer.close()

    async def _connect(
        self, listener: _Listener, destination: _Destination
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The connection to an admitted destination, to the very addresses checked here (a
        second lookup could answer differently); a ProxyRefusal (403, 502) otherwise."""
        host, port = destination.host, destination.port
        glob = admits(listener.allowed, host, port)
        if glob is None:
            self._refuse(listener, host, port)
            raise ProxyRefusal(
                403,
                "Forbidden",
                f"{host}:{port} is not in this command's network list (docs/sandbox.md)",
            )
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                found = await self._look_up(listener, host, port)
        except TimeoutError:
            raise ProxyRefusal(
                502,
                "Bad Gateway",
                f"cannot resolve {host}: no answer within {CONNECT_TIMEOUT:g} s",
            ) from None
        except OSError as error:
            raise ProxyRefusal(502, "Bad Gateway", f"cannot resolve {host}: {error}") from None
        addresses = [(family, str(sockaddr[0])) for family, _, _, _, sockaddr in found]
        if not addresses:
            raise ProxyRefusal(502, "Bad Gateway", f"{host} resolves to no address")
        private = [address for _, address in addresses if is_private(address)]
        if private and not names_exactly(glob, host):
            self._refuse(listener, host, port)
            raise ProxyRefusal(
                403,
                "Forbidden",
                f"{host}:{port} resolves to a private address ({private[0]}); only a network "
                f"entry naming {host} exactly may reach one, not {glob} (docs/sandbox.md)",
            )
        failure: BaseException | None = None
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                for family, address in addresses:
                    try:
                        return await asyncio.open_connection(address, port, family=family)
                    except OSError as error:
                        failure = error
        except TimeoutError:
            failure = TimeoutError(f"no answer within {CONNECT_TIMEOUT:g} s")
        raise ProxyRefusal(502, "Bad Gateway", f"cannot connect to {host}:{port}: {failure}")

    async def _look_up(self, listener: _Listener, host: str, port: int) -> list[tuple[Any, ...]]:
        """`host`'s addresses, looked up on the proxy's threads. The key's slot is given back
        when the lookup's thread is done, not when its caller stops waiting: a lookup past the
        timeout still holds a thread, and a command whose lookups time out one after another
        would otherwise take every thread of the pool from the other commands."""
        await listener.lookups.acquire()
        loop = asyncio.get_running_loop()

        def give_back(_: object) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile (shutdown)
                loop.call_soon_threadsafe(listener.lookups.release)

        try:
            lookup = self._resolver_threads.submit(
                self._resolve, host, port, type=socket.SOCK_STREAM
            )
        except BaseException:
            listener.lookups.release()
            raise
        lookup.add_done_callback(give_back)
        return await asyncio.wrap_future(lookup)

    def _refuse(self, listener: _Listener, host: str, port: int) -> None:
        """Keep the first REFUSED_KEPT distinct refusals and log each once."""
        destination = f"{host}:{port}"
        if destination in listener.refused:
            return
        if len(listener.refused) < REFUSED_KEPT:
            listener.refused.append(destination)
            logger.info("egress for %s refused %s", listener.key, destination)
        elif not listener.refusals_unlisted:
            listener.refusals_unlisted = True
            logger.info(
                "egress for %s refused more than %d destinations; no more are logged",
                listener.key,
                REFUSED_KEPT,
            )
