"""The few things the asyncio flavour does differently from the blocking one: how it sleeps,
locks and runs blocking local file work, and how an upload's body is read. Everything else of
the async client is written once, in async_*.py, and its sync twin generated from it
(sdk/generate_sync.py); sync_primitives.py is this module's hand-written twin."""

from __future__ import annotations

from asyncio import Lock, sleep
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator
from typing import TypeVar, TypeVarTuple

import anyio

from shellgate import transfers
from shellgate.transfers import UploadSource

__all__ = ["Lock", "run_blocking", "sleep", "upload_content"]

T = TypeVar("T")
Args = TypeVarTuple("Args")


async def run_blocking(function: Callable[[*Args], T], *args: *Args) -> T:
    """Local file work (open, write, rename) in a worker thread, never on the event loop."""
    return await anyio.to_thread.run_sync(function, *args)


async def upload_content(
    source: UploadSource | AsyncIterable[bytes],
) -> tuple[transfers.UploadBody, AsyncIterator[bytes]]:
    """The upload's body and its chunks, hashed as they are sent: an async iterable of chunks
    is read on the loop; a path, bytes or a file in worker threads, chunk by chunk."""
    if isinstance(source, AsyncIterable):
        body = transfers.UploadBody(iter(()), None)
        return body, _hashed(source, body)
    body = await run_blocking(transfers.upload_body, source)
    return body, _in_threads(body.hashed())


async def _in_threads(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """A blocking chunk source (a file being read) read in a worker thread, chunk by chunk."""
    done = object()
    while (chunk := await anyio.to_thread.run_sync(next, chunks, done)) is not done:
        yield chunk  # type: ignore[misc]


async def _hashed(source: AsyncIterable[bytes], body: transfers.UploadBody) -> AsyncIterator[bytes]:
    async for chunk in source:
        if chunk:
            body.digest.update(chunk)
            yield bytes(chunk)
