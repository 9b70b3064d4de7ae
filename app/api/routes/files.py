"""`/v1/files`: streamed upload and download, stat, and the record of every file operation
(docs/api.md#files)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse
from starlette.requests import ClientDisconnect

from app.api.deps import PrincipalDep, ServicesDep
from app.api.errors import error_responses
from app.api.file_response import SizedFileResponse
from app.api.operation_ids import operation_id
from app.core.errors import InvalidRequestError
from app.files.service import Pending, Readable, parse_mode
from app.schemas.files import (
    FileCheckPublic,
    FileOperationPublic,
    FileOperationsPublic,
    FileStatPublic,
)

router = APIRouter(generate_unique_id_function=operation_id, prefix="/v1/files", tags=["files"])

PathQuery = Annotated[
    str,
    Query(
        description="The file: absolute, or relative to the workspace (`~` expands). Symlinks "
        "are followed, and the policy judges the path both as written and as resolved."
    ),
]
ApprovalWaitQuery = Annotated[
    float,
    Query(
        ge=0,
        le=3600,
        allow_inf_nan=False,
        description="Seconds to hold for a human decision when the policy says `prompt`, "
        "before answering 202 with the operation's record.",
    ),
]
ApprovalIdQuery = Annotated[
    str | None,
    Query(
        max_length=64,
        description="Re-send a prompted operation that was answered 202 with the approval it "
        "asked for: once approved it runs (once).",
    ),
]
_PENDING: dict[int | str, dict[str, Any]] = {
    202: {
        "model": FileOperationPublic,
        "description": "The policy says `prompt` and no decision came within `approval_wait`: "
        "re-send the same request with `approval_id` once it is approved.",
    }
}
_DESCRIBED = {
    403: "The policy's `files` rules deny it (`policy_denied`), a human rejected it "
    "(`approval_rejected`), the caller is an approver (`forbidden`), or the server's user "
    "may not (`forbidden`).",
    404: "No such file, or its directory does not exist (`not_found`).",
    409: "The path is a directory or not a regular file, or the approval named is for another "
    "operation or already used (`conflict`).",
}


@router.get(
    "",
    response_class=Response,
    responses={
        200: {"content": {"application/octet-stream": {}}, "description": "The file's bytes."},
        206: {"content": {"application/octet-stream": {}}, "description": "The `Range` asked for."},
        **_PENDING,
        **error_responses(
            400,
            401,
            403,
            404,
            409,
            416,
            422,
            described={
                **_DESCRIBED,
                400: "The `Range` header is not a byte range (`bad_request`).",
            },
        ),
    },
    summary="Download a file",
)
async def download(
    request: Request,
    principal: PrincipalDep,
    services: ServicesDep,
    path: PathQuery,
    approval_wait: ApprovalWaitQuery = 30,
    approval_id: ApprovalIdQuery = None,
) -> Response:
    """Streamed, with `Content-Length`, `ETag`, `Last-Modified` and `Accept-Ranges: bytes`; a
    single or multiple byte `Range` answers 206."""
    responses: list[SizedFileResponse] = []

    def accept(readable: Readable) -> None:
        # Built once the file is known, so that a `Range` it refuses (400, 416) is the read's
        # recorded failure, not a read recorded `completed` that sent nothing.
        async def cut_short(why: str) -> None:
            await services.files.read_cut_short(readable, why)

        response = SizedFileResponse(
            readable.located.resolved,
            file=readable.file,
            stat_result=readable.stat,
            media_type="application/octet-stream",
            on_cut=cut_short,
        )
        response.check_range(request.headers.get("range"), request.headers.get("if-range"))
        responses.append(response)

    opened = await services.files.open_read(
        principal, path, approval_id=approval_id, approval_wait=approval_wait, accept=accept
    )
    if isinstance(opened, Pending):
        return _pending(opened)
    return responses[0]


@router.put(
    "",
    status_code=201,
    response_model=FileOperationPublic,
    responses={
        **_PENDING,
        **error_responses(
            401,
            403,
            404,
            409,
            413,
            422,
            described={
                **_DESCRIBED,
                413: "The body is larger than `SHELLGATE_FILES_MAX_BYTES` (`too_large`); the old "
                "file is untouched.",
            },
        ),
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            },
        }
    },
    summary="Upload a file",
)
async def upload(
    request: Request,
    principal: PrincipalDep,
    services: ServicesDep,
    path: PathQuery,
    mode: Annotated[
        str | None,
        Query(
            max_length=8,
            description="Octal permission bits (`0644`); a setuid or setgid mode is refused "
            "(422). Default: the replaced file's less setuid and setgid, or 0644.",
        ),
    ] = None,
    approval_wait: ApprovalWaitQuery = 30,
    approval_id: ApprovalIdQuery = None,
    parents: Annotated[
        bool,
        Query(
            description="Make the missing directories first (as `mkdir -p`), each judged by "
            "the policy's files rules as a write; without it a missing directory is a 404."
        ),
    ] = False,
) -> Response:
    """The body is the file's bytes, streamed to a temporary file beside the target and renamed
    over it once complete: readers see the old file or the new one, never a part."""
    declared = _content_length(request)
    result = await services.files.write(
        principal,
        path,
        _body(request),
        declared_size=declared,
        mode=parse_mode(mode),
        approval_id=approval_id,
        approval_wait=approval_wait,
        parents=parents,
    )
    if isinstance(result, Pending):
        return _pending(result)
    return JSONResponse(result.model_dump(mode="json"), status_code=201)


@router.get(
    "/stat",
    response_model=FileStatPublic,
    responses={**_PENDING, **error_responses(401, 403, 404, 409, 422, described=_DESCRIBED)},
    summary="Describe a file",
)
async def stat_file(
    principal: PrincipalDep,
    services: ServicesDep,
    path: PathQuery,
    sha256: Annotated[bool, Query(description="Also hash the file (reads all of it).")] = False,
    approval_wait: ApprovalWaitQuery = 30,
    approval_id: ApprovalIdQuery = None,
) -> Response:
    """Type, size, mode and mtime of what the path leads to (a stat is judged as a read)."""
    result = await services.files.stat(
        principal, path, sha256=sha256, approval_id=approval_id, approval_wait=approval_wait
    )
    if isinstance(result, Pending):
        return _pending(result)
    public = FileStatPublic(
        path=result.path,
        resolved_path=result.resolved_path,
        type=result.type,
        size=result.size,
        mode=result.mode,
        mtime=result.mtime,
        symlink=result.symlink,
        sha256=result.sha256,
    )
    return JSONResponse(public.model_dump(mode="json"))


@router.get(
    "/check",
    response_model=FileCheckPublic,
    responses=error_responses(401, 422),
    summary="Dry-run the files rules",
)
async def check(
    _principal: PrincipalDep,
    services: ServicesDep,
    path: PathQuery,
    access: Annotated[Literal["read", "write"], Query(description="A stat is a read.")] = "read",
) -> FileCheckPublic:
    """What the policy's `files` rules would decide for this access to this path; nothing is
    read, written or recorded."""
    located, verdict = await services.files.check(path, access)
    return FileCheckPublic(
        verdict=verdict.approval,
        reason=verdict.reason,
        rule=verdict.rule,
        path=located.path,
        resolved_path=located.resolved,
        judged_path=verdict.path,
    )


@router.get(
    "/operations",
    response_model=FileOperationsPublic,
    responses=error_responses(401, 422),
    summary="List file operations",
)
async def list_operations(
    principal: PrincipalDep,
    services: ServicesDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> FileOperationsPublic:
    """Newest first. Approvers and admins see everyone's; an agent sees its own."""
    return FileOperationsPublic(data=await services.files.list(principal, limit=limit))


@router.post(
    "/operations/{operation_id}/cancel",
    response_model=FileOperationPublic,
    responses=error_responses(401, 403, 404, 409),
    summary="Cancel a file operation awaiting approval",
)
async def cancel_operation(
    operation_id: str, principal: PrincipalDep, services: ServicesDep
) -> FileOperationPublic:
    """Withdraws the approval a prompted operation waits on: the approval ends `expired`, the
    operation `rejected`, and its retry answers 403 `approval_rejected`. Its owner or an admin;
    an operation no longer awaiting a decision is 409."""
    return await services.files.cancel(principal, operation_id)


def _pending(pending: Pending) -> JSONResponse:
    return JSONResponse(pending.record.model_dump(mode="json"), status_code=202)


def _content_length(request: Request) -> int | None:
    header = request.headers.get("content-length")
    if header is None:
        return None
    if not header.isdigit():
        raise InvalidRequestError("Content-Length is not a number")
    return int(header)


async def _body(request: Request) -> AsyncIterator[bytes]:
    try:
        async for chunk in request.stream():
            if chunk:
                yield chunk
    except ClientDisconnect:
        raise InvalidRequestError("the upload ended before its last byte") from None
