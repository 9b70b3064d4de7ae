"""The client's file methods (docs/sdk.md#files): uploads streamed from a path, bytes or a
stream and checked by sha256; downloads streamed to bytes, a file or a loop, resumed with
`Range` from the last byte received when the connection drops. `AsyncFiles` does its local
file reads and writes in worker threads, never on the event loop (async_primitives.py).
sync_files.py is generated from async_files.py."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import AsyncIterable, AsyncIterator
from pathlib import Path
from typing import IO, TypeVar

import httpx

from shellgate import calls, transfers
from shellgate.async_primitives import run_blocking, sleep, upload_content
from shellgate.calls import Call
from shellgate.models import FileCheck, FileDownload, FileOperation, FileOperationList, FileStat
from shellgate.reconnect import Backoff
from shellgate.transfers import DEFAULT_APPROVAL_WAIT, FILES_PATH, UploadSource

T = TypeVar("T")


class AsyncFiles:
    """Mixed into the client (`AsyncClient`, `Client`), which provides the HTTP connection
    and `_call`."""

    _http: httpx.AsyncClient
    base_url: str
    reconnects: int

    async def _call(self, call: Call[T]) -> T:  # pragma: no cover - the client's own wins
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
        """Create or replace the server's file at `path` (relative: in its workspace) with
        `source`: a local path, bytes, an open binary file or an iterable of byte chunks (with
        `AsyncClient`, also an async iterable), sent as a stream. The server renames it into
        place once complete; the record it answers carries the sha256 of what it stored,
        checked here against what was sent (`TransferError`). `mode` is octal ("0644"). A
        prompt nobody decided within `approval_wait` raises `ApprovalPendingError`: re-send
        with its `approval_id`. `parents`: make the missing directories first (each judged by
        the policy)."""
        extra = {"mode": mode} if mode is not None else {}
        if parents:
            extra["parents"] = "true"
        params = transfers.transfer_params(path, approval_wait, approval_id, **extra)
        body, content = await upload_content(source)
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
            await run_blocking(body.closed)
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
        """The file's bytes from `offset`, as they arrive. A dropped connection is resumed
        at the next byte (`Range`, with `If-Range` so that only the same version of the file
        continues; a file replaced meanwhile raises `TransferError`)."""
        cursor = transfers.DownloadCursor(path, offset)
        backoff = Backoff(self.reconnects)
        while True:
            # A resumed read was already allowed; if it now asks for approval, say so at once.
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
            await sleep(backoff.failed(f"the download of {path}"))

    async def read_file(
        self,
        path: str,
        *,
        offset: int = 0,
        approval_wait: float = DEFAULT_APPROVAL_WAIT,
        approval_id: str | None = None,
    ) -> bytes:
        """The whole file from `offset`, in memory (for large files see `download_file`)."""
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
        """Stream the file into `destination`: a local path (written to a temporary file
        beside it and renamed over it once complete, so it is never seen half-written) or an
        open binary file. Answers where, how many bytes, and their sha256."""
        chunks = self.iter_file(path, approval_wait=approval_wait, approval_id=approval_id)
        if not isinstance(destination, (str, os.PathLike)):
            size, digest = await _write(chunks, destination)
            return FileDownload(path=getattr(destination, "name", "-"), size=size, sha256=digest)
        target = Path(destination)
        handle = await run_blocking(_temporary_beside, target)
        try:
            with handle:
                size, digest = await _write(chunks, handle)
            await run_blocking(os.replace, handle.name, target)
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
        """Type, size, mode and mtime (and with `sha256`, the file's hash)."""
        return await self._call(transfers.stat_file(path, sha256, approval_wait, approval_id))

    async def check_file(self, path: str, *, access: str = "read") -> FileCheck:
        """Dry run of the policy's `files` rules for a `read` or `write` of `path`."""
        return await self._call(transfers.check_file(path, access))

    async def list_file_operations(self, *, limit: int = 100) -> FileOperationList:
        """The recorded reads, writes and stats, newest first."""
        return await self._call(transfers.file_operations(limit))

    async def cancel_file_operation(self, operation_id: str) -> FileOperation:
        """Withdraw the approval a prompted operation awaits: it ends `rejected`."""
        return await self._call(transfers.cancel_file_operation(operation_id))


def _temporary_beside(target: Path) -> IO[bytes]:
    return tempfile.NamedTemporaryFile(prefix=f".{target.name}.", dir=target.parent, delete=False)


async def _write(chunks: AsyncIterator[bytes], handle: IO[bytes]) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    async for chunk in chunks:
        await run_blocking(handle.write, chunk)
        digest.update(chunk)
        size += len(chunk)
    return size, digest.hexdigest()
