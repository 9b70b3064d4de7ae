"""What the file methods send and how their answers are read, shared by the sync and the async
client (no network I/O here): the query of each route, the `Range` / `If-Range` headers of a
resumed download and the check of its answer, and the upload sources the SDK accepts
(docs/api.md#files, docs/sdk.md#files)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Union

import httpx

from shellgate.calls import ANSWER_MARGIN_SECONDS, Call, error_from, model
from shellgate.errors import ApprovalPendingError, ServerUnreachableError, TransferError
from shellgate.models import FileCheck, FileOperation, FileOperationList, FileStat
from shellgate.paths import segment

CHUNK_BYTES = 1024 * 1024
FILES_PATH = "/v1/files"
DEFAULT_APPROVAL_WAIT = 30.0

# A local path (str or os.PathLike), the bytes themselves, an open binary file, or any
# iterable of byte chunks (read once, so not re-sent).
UploadSource = Union[
    str, "os.PathLike[str]", bytes, bytearray, memoryview, IO[bytes], Iterable[bytes]
]


def transfer_params(
    path: str, approval_wait: float, approval_id: str | None, **extra: str
) -> dict[str, str | float]:
    params: dict[str, str | float] = {"path": path, "approval_wait": approval_wait, **extra}
    if approval_id:
        params["approval_id"] = approval_id
    return params


def read_seconds(approval_wait: float) -> float:
    """The read deadline of a transfer: the server may hold it for an approval first."""
    return approval_wait + ANSWER_MARGIN_SECONDS


def unreachable(
    base_url: str, error: Exception, what: str = "cannot reach the server at"
) -> ServerUnreachableError:
    """The SDK's exception for an httpx one (callers never see httpx's)."""
    if isinstance(error, httpx.TimeoutException):
        return ServerUnreachableError(f"no answer from {base_url} in time ({type(error).__name__})")
    return ServerUnreachableError(f"{what} {base_url}: {error or type(error).__name__}")


def pending(response: httpx.Response) -> ApprovalPendingError:
    operation: FileOperation = model(FileOperation)(response)
    return ApprovalPendingError(operation)


def _file_stat(response: httpx.Response) -> FileStat:
    if response.status_code == 202:
        raise pending(response)
    stat: FileStat = model(FileStat)(response)
    return stat


def stat_file(
    path: str, sha256: bool, approval_wait: float, approval_id: str | None
) -> Call[FileStat]:
    params = transfer_params(path, approval_wait, approval_id)
    if sha256:
        params["sha256"] = "true"
    return Call(
        "GET",
        f"{FILES_PATH}/stat",
        _file_stat,
        params=params,
        read_seconds=read_seconds(approval_wait),
    )


def check_file(path: str, access: str) -> Call[FileCheck]:
    return Call(
        "GET", f"{FILES_PATH}/check", model(FileCheck), params={"path": path, "access": access}
    )


def file_operations(limit: int) -> Call[FileOperationList]:
    return Call(
        "GET", f"{FILES_PATH}/operations", model(FileOperationList), params={"limit": limit}
    )


def cancel_file_operation(operation_id: str) -> Call[FileOperation]:
    path = f"{FILES_PATH}/operations/{segment(operation_id)}/cancel"
    return Call("POST", path, model(FileOperation))


@dataclass
class DownloadCursor:
    """Where a download stands: the next byte wanted and the version (ETag) of the file being
    read, so that a resumed request asks for the rest of that same version only."""

    path: str
    position: int
    etag: str | None = None
    started: bool = False  # an answer was read: a reconnect is a resume

    def headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        if self.position > 0:
            headers["Range"] = f"bytes={self.position}-"
            if self.etag:
                # Starlette answers the whole file (200) instead when the version changed.
                headers["If-Range"] = self.etag
        return headers

    def accept(self, response: httpx.Response) -> bool:
        """Checks an answer whose body is not read yet; False: nothing is left to read. Raises
        for a refusal, a pending approval, or a file that changed under a resume."""
        status = response.status_code
        if status == 416 and self.position > 0:
            size = response.headers.get("Content-Range", "").rpartition("/")[2]
            if size.isdigit() and int(size) == self.position:
                return False  # already at the end
        if status >= 400:
            raise error_from(response)
        if status == 202:
            raise pending(response)
        if self.position > 0:
            content_range = response.headers.get("Content-Range", "")
            if status != 206 or not content_range.startswith(f"bytes {self.position}-"):
                raise TransferError(
                    f"{self.path} changed on the server while it was downloaded; "
                    f"{self.position} bytes were read of the earlier version"
                )
        self.etag = self.etag or response.headers.get("ETag")
        self.started = True
        return True


@dataclass
class UploadBody:
    """An upload source as byte chunks, hashed as they are sent, with its size when known
    (sent as `Content-Length`; without it the body goes chunked)."""

    chunks: Iterator[bytes]
    size: int | None
    close: list[IO[bytes]] = field(default_factory=list)
    digest: hashlib._Hash = field(default_factory=hashlib.sha256)

    def hashed(self) -> Iterator[bytes]:
        for chunk in self.chunks:
            if chunk:
                self.digest.update(chunk)
                yield bytes(chunk)

    def headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/octet-stream"}
        if self.size is not None:
            headers["Content-Length"] = str(self.size)
        return headers

    def closed(self) -> None:
        for handle in self.close:
            handle.close()


def _file_chunks(handle: IO[bytes]) -> Iterator[bytes]:
    while chunk := handle.read(CHUNK_BYTES):
        yield chunk


def _remaining_size(handle: IO[bytes]) -> int | None:
    try:
        if not handle.seekable():
            return None
        return os.fstat(handle.fileno()).st_size - handle.tell()
    except (OSError, ValueError, AttributeError):
        return None


def upload_body(source: UploadSource) -> UploadBody:
    """Opens a path source (the caller closes it with `closed()`); bytes are sent in chunks."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = memoryview(source).cast("B")
        chunks = (
            data[start : start + CHUNK_BYTES].tobytes()
            for start in range(0, len(data), CHUNK_BYTES)
        )
        return UploadBody(chunks, len(data))
    if isinstance(source, (str, os.PathLike)):
        handle = open(source, "rb")  # noqa: SIM115 - closed by UploadBody.closed()
        return UploadBody(_file_chunks(handle), _remaining_size(handle), close=[handle])
    if hasattr(source, "read"):
        readable: IO[bytes] = source  # type: ignore[assignment]
        return UploadBody(_file_chunks(readable), _remaining_size(readable))
    return UploadBody(iter(source), None)


def stored(response: httpx.Response, body: UploadBody) -> FileOperation:
    """The record of a finished upload, checked against the bytes that were sent."""
    if response.status_code == 202:
        raise pending(response)
    operation: FileOperation = model(FileOperation)(response)
    sent = body.digest.hexdigest()
    if operation.sha256 != sent:
        raise TransferError(
            f"{operation.path} was stored with sha256 {operation.sha256}, but the bytes sent "
            f"have {sent} (the source changed while it was read?)"
        )
    return operation
