"""The async client's file methods, the twins of sync_files.py (docs/sdk.md#files). Local
file reads and writes run in worker threads (anyio), never on the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import tempfile
from collections.abc import AsyncIterable, AsyncIterator, Iterator
from pathlib import Path
from typing import IO, TypeVar

import anyio
import httpx

from shellgate import calls, transfers
from shellgate.calls import Call
from shellgate.models import FileCheck, FileDownload, FileOperation, FileOperationList, FileStat
from shellgate.reconnect import Backoff
from shellgate.transfers import DEFAULT_APPROVAL_WAIT, FILES_PATH, UploadSource

T = TypeVar("T")


class AsyncFiles:
    """Mixed into `AsyncClient`, which provides the HTTP connection and `_call`."""

    _http: httpx.AsyncClient
    base_url: str
    reconnects: int

    async def _call(self, call: Call[T]) -> T:  # pragma: no cover - AsyncClient's own wins
        raise NotImplementedError

    async def put_file(
        self,
        path: str,
        source: UploadSource | AsyncIterable[bytes],
        *,
        mode: str | None = None,
        approval_wait: float = DEFAULT_APPROVAL_WAIT,
        approval_id: str | None = None,
        parents: bool = False,
    ) -> FileOperation:
        """As `Client.put_file`; `source` may also be an async iterable of byte chunks."""
        extra = {"mode": mode} if mode is not None else {}
        if parents:
            extra["parents"] = "true"
        params = transfers.transfer_params(path, approval_wait, approval_id, **extra)
        if isinstance(source, AsyncIterable):
            body = transfers.UploadBody(iter(()), None)
            content: AsyncIterator[bytes] = _hashed_async(source, body)
        else:
            body = await anyio.to_thread.run_sync(transfers.upload_body, source)
            content = _in_threads(body.hashed())
        try:
            response = await self._http.put(
                FILES_PATH,
                params=params,
                content=content,
                headers=body.headers(),
                timeout=calls.timeout(transfers.read_seconds(approval_wait)),
            )
        except (httpx.TransportError, httpx.InvalidURL) as error:
            raise transfers.unreachable(self.base_url, error, "cannot upload to") from None
        finally:
            await anyio.to_thread.run_sync(body.closed)
        if response.status_code >= 400:
            raise calls.error_from(response)
        return transfers.stored(response, body)

    async def iter_file(
        self,
        path: str,
        *,
        offset: int = 0,
        approval_wait: float = DEFAULT_APPROVAL_WAIT,
        approval_id: str | None = None,
    ) -> AsyncIterator[bytes]:
        """As `Client.iter_file`: resumed with `Range` / `If-Range` after a drop."""
        cursor = transfers.DownloadCursor(path, offset)
        backoff = Backoff(self.reconnects)
        while True:
            params = (
                transfers.transfer_params(path, 0, None)
                if cursor.started
                else transfers.transfer_params(path, approval_wait, approval_id)
            )
            try:
                async with self._http.stream(
                    "GET",
                    FILES_PATH,
                    params=params,
                    headers=cursor.headers(),
                    timeout=calls.timeout(transfers.read_seconds(approval_wait)),
                ) as response:
                    if response.status_code >= 400 or response.status_code == 202:
                        await response.aread()
                    if not cursor.accept(response):
                        return
                    async for chunk in response.aiter_bytes(transfers.CHUNK_BYTES):
                        cursor.position += len(chunk)
                        backoff.progressed()
                        yield chunk
                return
            except (httpx.TransportError, httpx.StreamError) as error:
                if not cursor.started:
                    # Nothing came yet: no download to resume, the server is not reachable.
                    raise transfers.unreachable(self.base_url, error) from None
                # Reconnect below, from the byte after the last one handed out.
            await asyncio.sleep(backoff.failed(f"the download of {path}"))

    async def read_file(
        self,
        path: str,
        *,
        offset: int = 0,
        approval_wait: float = DEFAULT_APPROVAL_WAIT,
        approval_id: str | None = None,
    ) -> bytes:
        chunks = self.iter_file(
            path, offset=offset, approval_wait=approval_wait, approval_id=approval_id
        )
        return b"".join([chunk async for chunk in chunks])

    async def download_file(
        self,
        path: str,
        destination: str | os.PathLike[str] | IO[bytes],
        *,
        approval_wait: float = DEFAULT_APPROVAL_WAIT,
        approval_id: str | None = None,
    ) -> FileDownload:
        """As `Client.download_file` (a path destination is renamed into place complete)."""
        chunks = self.iter_file(path, approval_wait=approval_wait, approval_id=approval_id)
        if not isinstance(destination, (str, os.PathLike)):
            size, digest = await _write(chunks, destination)
            return FileDownload(path=getattr(destination, "name", "-"), size=size, sha256=digest)
        target = Path(destination)
        handle = await anyio.to_thread.run_sync(_temporary_beside, target)
        try:
            with handle:
                size, digest = await _write(chunks, handle)
            await anyio.to_thread.run_sync(os.replace, handle.name, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(handle.name)
            raise
        return FileDownload(path=str(target), size=size, sha256=digest)

    async def stat_file(
        self,
        path: str,
        *,
        sha256: bool = False,
        approval_wait: float = DEFAULT_APPROVAL_WAIT,
        approval_id: str | None = None,
    ) -> FileStat:
        return await self._call(transfers.stat_file(path, sha256, approval_wait, approval_id))

    async def check_file(self, path: str, *, access: str = "read") -> FileCheck:
        return await self._call(transfers.check_file(path, access))

    async def list_file_operations(self, *, limit: int = 100) -> FileOperationList:
        return await self._call(transfers.file_operations(limit))


def _temporary_beside(target: Path) -> IO[bytes]:
    return tempfile.NamedTemporaryFile(prefix=f".{target.name}.", dir=target.parent, delete=False)


async def _write(chunks: AsyncIterator[bytes], handle: IO[bytes]) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    async for chunk in chunks:
        await anyio.to_thread.run_sync(handle.write, chunk)
        digest.update(chunk)
        size += len(chunk)
    return size, digest.hexdigest()


async def _in_threads(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """A blocking chunk source (a file being read) read in a worker thread, chunk by chunk."""
    done = object()
    while (chunk := await anyio.to_thread.run_sync(next, chunks, done)) is not done:
        yield chunk  # type: ignore[misc]


async def _hashed_async(
    source: AsyncIterable[bytes], body: transfers.UploadBody
) -> AsyncIterator[bytes]:
    async for chunk in source:
        if chunk:
            body.digest.update(chunk)
            yield bytes(chunk)
