"""A gateway in front of the replicas for the fault suite, as nginx is in the compose `cluster`
profile (deploy/nginx.conf): round robin over the upstreams, a request passed to the next one
when an upstream refuses the connection (nginx's `proxy_next_upstream error`), an upstream that
failed skipped for a moment (`max_fails=1 fail_timeout`), a 503 `shutting_down` passed to
the next one too (the stopping replica refused it before reading it: nothing ran; nginx does so
for idempotent requests only), idempotent requests retried on any transport error, a
non-idempotent one only when it never reached an upstream, the client's cluster marker dropped.
HTTP only (the suite's WebSockets go to a replica directly).

Run as its own process: `python -m tests.cluster.gateway PORT UPSTREAM_URL...`."""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import time
from collections.abc import AsyncIterator

import httpx
import uvicorn

IDEMPOTENT = {"GET", "HEAD", "OPTIONS", "PUT", "DELETE"}
HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    "x-shellgate-cluster-secret",
}
# How long an upstream that refused a connection is skipped (nginx: fail_timeout).
FAIL_SECONDS = 1.0


class Gateway:
    def __init__(self, upstreams: list[str]) -> None:
        self.upstreams = upstreams
        self._turn = itertools.count()
        self._failed_at: dict[str, float] = {}
        self._client = httpx.AsyncClient(
            # A connection per request: a replica's graceful stop never closes one under us.
            limits=httpx.Limits(max_keepalive_connections=0),
            timeout=httpx.Timeout(None, connect=5),
        )

    def order(self) -> list[str]:
        start = next(self._turn) % len(self.upstreams)
        ring = self.upstreams[start:] + self.upstreams[:start]
        now = time.monotonic()
        healthy = [url for url in ring if now - self._failed_at.get(url, -1e9) > FAIL_SECONDS]
        return healthy + [url for url in ring if url not in healthy]

    async def __call__(self, scope: dict, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await self._client.aclose()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return  # a WebSocket is refused (closed before accept)
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        method = scope["method"]
        headers = [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in scope["headers"]
            if name.decode("latin-1").lower() not in HOP_BY_HOP
        ]
        path = scope.get("raw_path") or scope["path"].encode()
        if scope.get("query_string"):
            path += b"?" + scope["query_string"]
        for upstream in self.order():
            request = self._client.build_request(
                method, upstream + path.decode("latin-1"), headers=headers, content=body
            )
            try:
                response = await self._client.send(request, stream=True)
            except httpx.ConnectError:
                self._failed_at[upstream] = time.monotonic()
                continue
            except httpx.TransportError:
                self._failed_at[upstream] = time.monotonic()
                if method in IDEMPOTENT:
                    continue
                break
            if response.status_code == 503 and await _refused_for_stopping(response):
                # A replica that got SIGTERM refuses new work before it reads the body: nothing
                # ran there (app/api/stopping.py), so any request may go to the next one.
                self._failed_at[upstream] = time.monotonic()
                continue
            await self._relay(response, send)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 502,
                "headers": [(b"content-type", b"text/plain")],
            }
        )
        await send({"type": "http.response.body", "body": b"no upstream answered\n"})

    async def _relay(self, response: httpx.Response, send) -> None:  # type: ignore[no-untyped-def]
        headers = [
            (name.encode("latin-1"), value.encode("latin-1"))
            for name, value in response.headers.multi_items()
            if name.lower() not in HOP_BY_HOP and name.lower() != "content-encoding"
        ]
        await send(
            {"type": "http.response.start", "status": response.status_code, "headers": headers}
        )
        try:
            async for chunk in _chunks(response):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        finally:
            await response.aclose()
        await send({"type": "http.response.body", "body": b""})


async def _refused_for_stopping(response: httpx.Response) -> bool:
    body = await response.aread()
    try:
        return bool(json.loads(body)["error"]["code"] == "shutting_down")
    except (ValueError, KeyError, TypeError):
        return False


async def _chunks(response: httpx.Response) -> AsyncIterator[bytes]:
    async for chunk in response.aiter_bytes():
        yield chunk


def main() -> None:
    port = int(sys.argv[1])
    gateway = Gateway([url.rstrip("/") for url in sys.argv[2:]])
    config = uvicorn.Config(gateway, host="127.0.0.1", port=port, log_level="warning")
    asyncio.run(uvicorn.Server(config).serve())


if __name__ == "__main__":
    main()
