"""The egress proxy (app/sandbox/egress.py) over real sockets: a client on a key's Unix socket,
targets listening on 127.0.0.1. What a host list admits, what it refuses (and that a refused
target never saw a connection), the tunnel's bytes both ways, and a key's end cutting them."""

from __future__ import annotations

import asyncio
import os
import resource
import socket
import stat
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.process.descriptor_limit import SOFT_LIMIT_CEILING
from app.sandbox import egress
from app.sandbox.egress import EgressProxy, admits

pytestmark = pytest.mark.anyio

WAIT = 5  # bounds every read that should end at once: a hang fails instead of blocking


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Target:
    """A server on 127.0.0.1 that counts its connections. As an echo target it returns each
    chunk and, at the client's end of file, writes `<eof>` and closes; as an HTTP target it
    reads one request head, keeps it, and answers `ok`."""

    def __init__(self, *, http: bool = False) -> None:
        self.http = http
        self.connections = 0
        self.heads: list[bytes] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Target:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            if self.http:
                self.heads.append(await reader.readuntil(b"\r\n\r\n"))
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            else:
                while data := await reader.read(65536):
                    writer.write(data)
                    await writer.drain()
                writer.write(b"<eof>")
            await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()


@pytest.fixture
async def proxy() -> AsyncIterator[EgressProxy]:
    proxy = EgressProxy()
    yield proxy
    await proxy.aclose()


async def read_response(reader: asyncio.StreamReader) -> tuple[int, str, bytes]:
    """One response: its status, its head and its body (by Content-Length)."""
    async with asyncio.timeout(WAIT):
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        length = 0
        for line in head.split("\r\n")[1:]:
            name, _, value = line.partition(":")
            if name.lower() == "content-length":
                length = int(value)
        body = await reader.readexactly(length)
    return int(head.split(" ")[1]), head, body


async def ask(path: str, request: bytes) -> tuple[int, str, bytes]:
    """The proxy's answer to a request that it does not tunnel."""
    reader, writer = await asyncio.open_unix_connection(path)
    try:
        writer.write(request)
        await writer.drain()
        return await read_response(reader)
    finally:
        writer.close()


def exists(path: str) -> bool:
    return os.path.exists(path)


async def read_to_end(reader: asyncio.StreamReader) -> bytes:
    async with asyncio.timeout(WAIT):
        return await reader.read()


def test_admits_a_literal_host_and_wildcards_as_text_in_any_case() -> None:
    assert admits(["pypi.org"], "pypi.org", 443) == "pypi.org"
    assert admits(["pypi.org"], "PyPI.org", 443) == "pypi.org"
    assert admits(["pypi.org"], "files.pypi.org", 443) is None
    assert admits(["*.github.com"], "api.github.com", 443) == "*.github.com"
    assert admits(["*.github.com"], "github.com", 443) is None
    assert admits(["*.GitHub.com"], "API.github.COM", 443) == "*.GitHub.com"
    assert admits(["pypi.org", "*.github.com"], "api.github.com", 80) == "*.github.com"
    assert admits(["*.corp:*", "db.corp:5432"], "db.corp", 5432) == "db.corp:5432", "exact first"
    assert admits(["*.corp:*", "db.corp:5432"], "db.corp", 80) == "*.corp:*"


def test_admits_ports_80_and_443_only_without_a_port() -> None:
    assert admits(["example.com"], "example.com", 80) == "example.com"
    assert admits(["example.com"], "example.com", 443) == "example.com"
    assert admits(["example.com"], "example.com", 22) is None
    assert admits(["example.com:*"], "example.com", 22) == "example.com:*"
    assert admits(["example.com:8080"], "example.com", 8080) == "example.com:8080"
    assert admits(["example.com:8080"], "example.com", 443) is None
    assert admits(["example.com:8080"], "example.com", 80) is None


async def test_connect_tunnels_bytes_both_ways_and_a_half_close(proxy: EgressProxy) -> None:
    async with Target() as target:
        path = await proxy.open("run_1", [f"127.0.0.1:{target.port}"])
        reader, writer = await asyncio.open_unix_connection(path)
        writer.write(f"CONNECT 127.0.0.1:{target.port} HTTP/1.1\r\nHost: x\r\n\r\nfirst".encode())
        async with asyncio.timeout(WAIT):
            assert await reader.readuntil(b"\r\n\r\n") == (
                b"HTTP/1.1 200 Connection established\r\n\r\n"
            )
            assert await reader.readexactly(5) == b"first", "bytes after the head go through"
            writer.write(b"second")
            assert await reader.readexactly(6) == b"second"
        writer.write_eof()
        assert await read_to_end(reader) == b"<eof>", "the target saw the end, its reply came"
        writer.close()
        assert target.connections == 1
        assert proxy.refused("run_1") == []


async def test_a_host_not_listed_is_refused_and_never_reached(proxy: EgressProxy) -> None:
    async with Target() as target:
        path = await proxy.open("run_1", ["pypi.org"])
        status, head, body = await ask(
            path, f"CONNECT 127.0.0.1:{target.port} HTTP/1.1\r\n\r\n".encode()
        )
        assert status == 403
        assert "Connection: close" in head
        assert (
            body
            == (
                f"shellgate egress proxy: 127.0.0.1:{target.port} is not in this command's network "
                "list (docs/sandbox.md)\n"
            ).encode()
        )
        await ask(path, b"GET http://example.com:8080/ HTTP/1.1\r\n\r\n")
        await ask(path, f"CONNECT 127.0.0.1:{target.port} HTTP/1.1\r\n\r\n".encode())
        assert target.connections == 0
        refused = [f"127.0.0.1:{target.port}", "example.com:8080"]
        assert proxy.refused("run_1") == refused, "distinct, in order"
        assert await proxy.close("run_1") == refused
        assert await proxy.close("run_1") == [], "closing again is harmless"


async def test_refusals_kept_are_the_first_ten_distinct(proxy: EgressProxy) -> None:
    path = await proxy.open("run_1", ["pypi.org"])
    for port in range(1, 13):
        status, _, _ = await ask(path, f"CONNECT blocked.example:{port} HTTP/1.1\r\n\r\n".encode())
        assert status == 403
    assert proxy.refused("run_1") == [f"blocked.example:{port}" for port in range(1, 11)]


async def test_a_wildcard_does_not_reach_a_private_address(proxy: EgressProxy) -> None:
    async with Target() as target:
        path = await proxy.open("run_1", ["local*:*"])
        request = f"CONNECT localhost:{target.port} HTTP/1.1\r\n\r\n".encode()
        status, _, body = await ask(path, request)
        assert status == 403
        assert b"resolves to a private address" in body
        assert target.connections == 0
        assert proxy.refused("run_1") == [f"localhost:{target.port}"]

        exact = await proxy.open("run_2", [f"localhost:{target.port}"])
        reader, writer = await asyncio.open_unix_connection(exact)
        writer.write(request + b"hi")
        writer.write_eof()
        async with asyncio.timeout(WAIT):
            assert await reader.readuntil(b"\r\n\r\n") == (
                b"HTTP/1.1 200 Connection established\r\n\r\n"
            )
        assert await read_to_end(reader) == b"hi<eof>", "a host named exactly may be private"
        writer.close()
        assert target.connections == 1


async def test_a_plain_http_request_goes_to_its_host_as_sent(proxy: EgressProxy) -> None:
    async with Target(http=True) as target:
        path = await proxy.open("run_1", [f"127.0.0.1:{target.port}"])
        request = (
            f"GET http://127.0.0.1:{target.port}/simple?x=1 HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{target.port}\r\n\r\n"
        ).encode()
        status, _, body = await ask(path, request)
        assert (status, body) == (200, b"ok")
        assert target.heads == [request]


async def test_a_plain_http_connection_stays_with_its_first_host(proxy: EgressProxy) -> None:
    async with Target() as target:
        path = await proxy.open("run_1", [f"127.0.0.1:{target.port}"])
        reader, writer = await asyncio.open_unix_connection(path)
        first = f"GET http://127.0.0.1:{target.port}/ HTTP/1.1\r\n\r\n".encode()
        second = b"GET http://elsewhere.example/ HTTP/1.1\r\n\r\n"
        writer.write(first)
        async with asyncio.timeout(WAIT):
            assert await reader.readexactly(len(first)) == first
            writer.write(second)
            assert await reader.readexactly(len(second)) == second, "to the first host"
        writer.close()
        assert target.connections == 1
        assert proxy.refused("run_1") == []


async def test_the_default_port_of_a_plain_http_request_is_80(proxy: EgressProxy) -> None:
    path = await proxy.open("run_1", ["127.0.0.1:8080"])
    status, _, _ = await ask(path, b"GET http://127.0.0.1/ HTTP/1.1\r\n\r\n")
    assert status == 403
    assert proxy.refused("run_1") == ["127.0.0.1:80"]


@pytest.mark.parametrize(
    ("request_line", "said"),
    [
        (b"hello", b"request line"),
        (b"GET / HTTP/1.1", b"names its URL in full"),
        (b"GET https://127.0.0.1/ HTTP/1.1", b"goes through CONNECT"),
        (b"CONNECT 127.0.0.1 HTTP/1.1", b"CONNECT takes `host:port`"),
        (b"CONNECT [::1]:443 HTTP/1.1", b"CONNECT takes `host:port`"),
        (b"GET http://user@127.0.0.1/ HTTP/1.1", b"no user"),
        (b"CONNECT 127.0.0.1:70000 HTTP/1.1", b"1..65535"),
        (b"CONNECT 127.0.0.1:443 HTTP/2.0", b"request line"),
    ],
)
async def test_what_is_not_a_proxy_request_is_a_400(
    proxy: EgressProxy, request_line: bytes, said: bytes
) -> None:
    path = await proxy.open("run_1", ["*:*"])
    status, head, body = await ask(path, request_line + b"\r\nHost: x\r\n\r\n")
    assert status == 400
    assert "Connection: close" in head
    assert body.startswith(b"shellgate egress proxy: ")
    assert said in body
    assert proxy.refused("run_1") == []


async def test_a_head_over_64_kib_is_a_431(proxy: EgressProxy) -> None:
    path = await proxy.open("run_1", ["*:*"])
    padding = b"X-Padding: " + b"a" * (egress.HEAD_MAX_BYTES + 1) + b"\r\n"
    status, _, _ = await ask(path, b"CONNECT 127.0.0.1:1 HTTP/1.1\r\n" + padding)
    assert status == 431


async def test_a_silent_client_is_dropped(
    proxy: EgressProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(egress, "HEAD_TIMEOUT", 0.05)
    path = await proxy.open("run_1", ["*:*"])
    reader, writer = await asyncio.open_unix_connection(path)
    writer.write(b"CONNECT 127.0.0.1:1 HTTP/1.1\r\n")
    assert await read_to_end(reader) == b""
    writer.close()


async def test_an_unresolvable_name_is_a_502(proxy: EgressProxy) -> None:
    path = await proxy.open("run_1", ["*.invalid:*"])
    status, _, body = await ask(path, b"CONNECT nonexistent.invalid:443 HTTP/1.1\r\n\r\n")
    assert status == 502
    assert b"cannot resolve nonexistent.invalid" in body


async def test_a_refused_connection_is_a_502(proxy: EgressProxy) -> None:
    async with Target() as target:
        port = target.port
    path = await proxy.open("run_1", [f"127.0.0.1:{port}"])
    status, _, body = await ask(path, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
    assert status == 502
    assert f"cannot connect to 127.0.0.1:{port}".encode() in body


async def test_connections_beyond_the_cap_are_a_503(
    proxy: EgressProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(egress, "CONNECTIONS_PER_KEY", 1)
    async with Target() as target:
        path = await proxy.open("run_1", [f"127.0.0.1:{target.port}"])
        reader, writer = await asyncio.open_unix_connection(path)
        writer.write(f"CONNECT 127.0.0.1:{target.port} HTTP/1.1\r\n\r\n".encode())
        async with asyncio.timeout(WAIT):
            await reader.readuntil(b"\r\n\r\n")
        status, _, _ = await ask(path, b"CONNECT 127.0.0.1:1 HTTP/1.1\r\n\r\n")
        assert status == 503
        writer.write_eof()
        assert await read_to_end(reader) == b"<eof>"
        writer.close()


async def test_all_commands_together_stay_under_the_servers_cap() -> None:
    """Each key below its own cap, the two together at the server's: the third connection,
    whichever command opens it, is a 503 naming the cap, and once one closes a new one passes."""
    proxy = EgressProxy(connections_cap=2)
    try:
        async with Target() as target:
            allowed = [f"127.0.0.1:{target.port}"]
            first_path = await proxy.open("run_1", allowed)
            second_path = await proxy.open("run_2", allowed)
            tunnels = []
            for path in (first_path, second_path):
                reader, writer = await asyncio.open_unix_connection(path)
                writer.write(f"CONNECT 127.0.0.1:{target.port} HTTP/1.1\r\n\r\n".encode())
                async with asyncio.timeout(WAIT):
                    assert b" 200 " in await reader.readuntil(b"\r\n\r\n")
                tunnels.append((reader, writer))
            connect = f"CONNECT 127.0.0.1:{target.port} HTTP/1.1\r\n\r\n".encode()
            for path in (first_path, second_path):
                status, _, body = await ask(path, connect)
                assert status == 503
                assert b"has 2 connections open for all commands" in body
            assert target.connections == 2

            reader, writer = tunnels.pop()
            writer.write_eof()
            assert await read_to_end(reader) == b"<eof>"
            writer.close()
            for _ in range(WAIT * 100):  # the proxy's side ends just after the target's
                if proxy.connections_open == 1:
                    break
                await asyncio.sleep(0.01)
            reader, writer = await asyncio.open_unix_connection(second_path)
            writer.write(connect)
            async with asyncio.timeout(WAIT):
                assert b" 200 " in await reader.readuntil(b"\r\n\r\n")
            tunnels.append((reader, writer))
            for _, writer in tunnels:
                writer.close()
    finally:
        await proxy.aclose()


async def test_slow_names_hold_neither_the_loops_resolver_nor_another_commands_lookups() -> None:
    """Lookups run on the proxy's own threads, two at a time per command: a command whose
    names resolve slowly waits for its own, and another command's name resolves meanwhile."""
    release = threading.Event()
    lookups: list[tuple[str, str]] = []

    def resolve(host: str, port: int, type: int = 0) -> list[tuple[Any, ...]]:
        lookups.append((host, threading.current_thread().name))
        if host.startswith("slow"):
            release.wait(WAIT)  # a DNS server that takes its time
        return socket.getaddrinfo("127.0.0.1", port, type=type)

    proxy = EgressProxy(resolve=resolve)
    try:
        async with Target() as target:
            slow_names = [f"slow{number}.test" for number in range(3)]
            slow_path = await proxy.open("run_1", [f"{name}:{target.port}" for name in slow_names])
            fast_path = await proxy.open("run_2", [f"fast.test:{target.port}"])
            waiting = []
            for name in slow_names:
                reader, writer = await asyncio.open_unix_connection(slow_path)
                writer.write(f"CONNECT {name}:{target.port} HTTP/1.1\r\n\r\n".encode())
                waiting.append((reader, writer))
            for _ in range(WAIT * 100):
                if len(lookups) >= 2:
                    break
                await asyncio.sleep(0.01)
            reader, writer = await asyncio.open_unix_connection(fast_path)
            writer.write(f"CONNECT fast.test:{target.port} HTTP/1.1\r\n\r\n".encode())
            async with asyncio.timeout(WAIT):
                assert b" 200 " in await reader.readuntil(b"\r\n\r\n")
            writer.close()
            slow_started = [host for host, _ in lookups if host.startswith("slow")]
            assert len(slow_started) == 2, lookups  # the third waits for one of them
            release.set()
            for reader, writer in waiting:
                async with asyncio.timeout(WAIT):
                    assert b" 200 " in await reader.readuntil(b"\r\n\r\n")
                writer.close()
        assert sorted(host for host, _ in lookups) == ["fast.test", *slow_names]
        assert all(thread.startswith("shellgate-egress-dns") for _, thread in lookups), lookups
    finally:
        release.set()
        await proxy.aclose()


async def test_a_lookup_without_an_answer_in_time_is_a_502_that_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(egress, "CONNECT_TIMEOUT", 0.2)
    release = threading.Event()

    def resolve(host: str, port: int, type: int = 0) -> list[tuple[Any, ...]]:
        release.wait(WAIT)
        return socket.getaddrinfo("127.0.0.1", port, type=type)

    proxy = EgressProxy(resolve=resolve)
    try:
        path = await proxy.open("run_1", ["slow.test:443"])
        status, _, body = await ask(path, b"CONNECT slow.test:443 HTTP/1.1\r\n\r\n")
        assert status == 502
        assert b"cannot resolve slow.test: no answer within 0.2 s" in body
    finally:
        release.set()
        await proxy.aclose()


async def test_lookups_past_their_timeout_keep_their_commands_slots(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A lookup that timed out still holds its thread until its DNS answers: the command keeps
    its two slots until then, so ten timed-out lookups in a row take two threads, not the
    pool, and another command's name still resolves."""
    monkeypatch.setattr(egress, "CONNECT_TIMEOUT", 0.2)
    release = threading.Event()
    lookups: list[str] = []

    def resolve(host: str, port: int, type: int = 0) -> list[tuple[Any, ...]]:
        lookups.append(host)
        if host.startswith("slow"):
            release.wait(WAIT)
        return socket.getaddrinfo("127.0.0.1", port, type=type)

    proxy = EgressProxy(resolve=resolve)
    try:
        async with Target() as target:
            slow_path = await proxy.open("run_1", [f"slow.test:{target.port}"])
            fast_path = await proxy.open("run_2", [f"fast.test:{target.port}"])
            for _ in range(egress.RESOLVER_THREADS + 2):
                connect = f"CONNECT slow.test:{target.port} HTTP/1.1\r\n\r\n".encode()
                status, _, _ = await ask(slow_path, connect)
                assert status == 502
            assert lookups.count("slow.test") == egress.LOOKUPS_PER_KEY
            reader, writer = await asyncio.open_unix_connection(fast_path)
            writer.write(f"CONNECT fast.test:{target.port} HTTP/1.1\r\n\r\n".encode())
            async with asyncio.timeout(WAIT):
                assert b" 200 " in await reader.readuntil(b"\r\n\r\n")
            writer.close()
    finally:
        release.set()
        await proxy.aclose()


def test_the_servers_cap_is_a_share_of_its_open_files_limit() -> None:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        soft = SOFT_LIMIT_CEILING
    expected = max(1, soft // egress.DESCRIPTOR_SHARE // 2)
    assert EgressProxy().connections_cap == expected


async def test_the_socket_is_the_servers_own(proxy: EgressProxy) -> None:
    path = await proxy.open("run_1", ["pypi.org"])
    assert stat.S_ISSOCK(os.stat(path).st_mode)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    assert len(os.fsencode(path)) < 108
    with pytest.raises(ValueError, match="already open"):
        await proxy.open("run_1", ["pypi.org"])
    with pytest.raises(ValueError, match="letters, digits"):
        await proxy.open("../run", ["pypi.org"])


async def test_close_cuts_open_tunnels_and_removes_the_socket(proxy: EgressProxy) -> None:
    async with Target() as target:
        path = await proxy.open("run_1", [f"127.0.0.1:{target.port}"])
        other = await proxy.open("run_2", [f"127.0.0.1:{target.port}"])
        reader, writer = await asyncio.open_unix_connection(path)
        writer.write(f"CONNECT 127.0.0.1:{target.port} HTTP/1.1\r\n\r\nping".encode())
        async with asyncio.timeout(WAIT):
            await reader.readuntil(b"\r\n\r\n")
            assert await reader.readexactly(4) == b"ping"
        assert await proxy.close("run_1") == []
        assert await read_to_end(reader) == b"", "the open tunnel ends"
        writer.close()
        assert not exists(path)
        with pytest.raises(OSError):
            await asyncio.open_unix_connection(path)
        assert exists(other), "another key's socket stays"

        directory = os.path.dirname(other)
        await proxy.aclose()
        assert not exists(directory)
        assert proxy.refused("run_2") == []
