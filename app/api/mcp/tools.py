"""The MCP tools beyond `bash` and its job tools: files (read, write, stat) and sessions
(start, run, close). Same use-cases as REST, described for an MCP caller: each description
names the tool to call next, never a REST path.

`mcp_server.build_mcp_server` registers them with the helpers it owns (who the caller is, how
an execution answers), passed in so that this module needs no HTTP types.
"""

from __future__ import annotations

import base64
import binascii
import codecs
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Annotated, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from app.api.mcp.forward import Owner
from app.core.auth import Principal
from app.core.errors import AppError, ConflictError, InvalidRequestError
from app.files.service import Pending, parse_mode
from app.schemas import (
    ExecutionCreate,
    ExecutionPublic,
    SandboxRequest,
    SessionCreate,
    SessionPending,
)
from app.services import Services

MAX_FILE_READ_BYTES = 1024 * 1024
DEFAULT_FILE_READ_BYTES = 256 * 1024
WRITE_CHUNK_BYTES = 1024 * 1024
Encoding = Literal["text", "base64"]

READ_ONLY = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
FILE_WRITE_ANNOTATIONS = ToolAnnotations(
    title="Write a file",
    read_only_hint=False,
    destructive_hint=True,  # it replaces what was there
    idempotent_hint=True,  # the same content twice leaves the same file
    open_world_hint=False,
)
SESSION_START_ANNOTATIONS = ToolAnnotations(
    title="Start a shell session",
    read_only_hint=False,
    destructive_hint=False,
    idempotent_hint=False,
    open_world_hint=False,
)
SESSION_RUN_ANNOTATIONS = ToolAnnotations(
    title="Run a command in a session",
    read_only_hint=False,
    destructive_hint=True,
    idempotent_hint=False,
    open_world_hint=True,
)
SESSION_CLOSE_ANNOTATIONS = ToolAnnotations(
    title="Close a session",
    read_only_hint=False,
    destructive_hint=True,  # its shell state (cwd, variables, functions) is gone
    idempotent_hint=False,
    open_world_hint=False,
)

IDLE_TIMEOUT_DESCRIPTION = (
    "Seconds without any output after which this call returns with the output so far and the "
    "notice `No output for {N}s; the command may be waiting for input or stuck.` (the command "
    "goes on as a job: follow it with `job_wait`), or, with `idle_action: cancel`, the command "
    "is cancelled. Use it for commands that might wait for input."
)
NOTIFY_URL_DESCRIPTION = (
    "A URL to receive the final result without asking for it: when the command ends (also "
    "after this call answered and it went on as a job), the server POSTs its final record as "
    "JSON there, signed with HMAC-SHA256 in the `X-Shellgate-Signature` header, retrying for a "
    "while if the receiver fails. Only URLs the server's operator allows are accepted."
)

PATH_DESCRIPTION = (
    "The file: absolute, or relative to the workspace (where commands run by default). "
    "Symlinks are followed."
)
APPROVAL_WAIT_DESCRIPTION = (
    "Seconds this call holds for a human decision when the policy asks for an approval of "
    "this file operation (0: answer at once with the approval id)."
)
APPROVAL_ID_DESCRIPTION = (
    "The approval id an earlier call of this tool answered with: repeat that call with the "
    "same arguments and this id; it waits for the decision and runs once approved (once)."
)
# The approval flow's two parameters, the same on every file tool.
ApprovalWait = Annotated[
    float, Field(ge=0, le=3600, allow_inf_nan=False, description=APPROVAL_WAIT_DESCRIPTION)
]
ApprovalId = Annotated[str | None, Field(max_length=64, description=APPROVAL_ID_DESCRIPTION)]
POLICY_SENTENCE = (
    "The server's policy judges the path (as written and with symlinks followed): a denied "
    "path is a tool error that says why; a path that needs a human approval holds this call up "
    "to `approval_wait` seconds for the decision, and, still undecided, answers with an "
    "approval id to pass back as `approval_id` on the same call later."
)


@dataclass(frozen=True)
class McpHelpers:
    principal: Callable[[Context], Principal]
    execution_result: Callable[[ExecutionPublic], CallToolResult]
    tool_error: Callable[[AppError], CallToolResult]
    authorization: Callable[[Context], str]  # the caller's header, for a call on the owner


class FileResult(BaseModel):
    """What every file tool answers: `completed`, or `awaiting_approval` with the approval id
    to pass back (and then the other fields are null)."""

    state: Literal["completed", "awaiting_approval"] = "completed"
    approval_id: str | None = Field(
        default=None, description="While awaiting approval: pass it back as `approval_id`."
    )
    path: str


class FileReadResult(FileResult):
    size: int | None = Field(default=None, description="The file's size in bytes.")
    offset: int | None = None
    next_offset: int | None = Field(default=None, description="Where the next call continues.")
    eof: bool | None = Field(default=None, description="Nothing is left after next_offset.")
    encoding: Encoding | None = None


class FileWriteResult(FileResult):
    size: int | None = None
    sha256: str | None = None
    mode: str | None = None


class FileStatResult(FileResult):
    resolved_path: str | None = None
    type: str | None = None
    size: int | None = None
    mode: str | None = None
    mtime: str | None = None
    symlink: bool | None = None
    sha256: str | None = None


class SessionResult(BaseModel):
    id: str
    cwd: str
    timeout_ms: int


def _pending_result(pending: Pending, tool: str, path: str) -> CallToolResult:
    record = pending.record
    text = (
        f"The {record.op} of {record.path} needs a human approval ({record.reason}); no "
        f"decision came in time. Call {tool} again with the same arguments and approval_id "
        f'"{record.approval_id}": it waits for the decision and runs once approved.'
    )
    result = FileResult(state="awaiting_approval", approval_id=record.approval_id, path=path)
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=result.model_dump(mode="json"),
    )


def decode_text_window(data: bytes, at_end: bool) -> tuple[str, int]:
    """UTF-8 text with replacement for invalid bytes, and how many bytes it used: a character
    cut by the window's end is left for the next window (unless the file ends there)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text = decoder.decode(data, final=False)
    cut = len(decoder.getstate()[0])
    if cut == 0 or cut == len(data) or at_end:
        return text + decoder.decode(b"", final=True), len(data)
    return text, len(data) - cut


def _decode_content(content: str, encoding: Encoding) -> bytes:
    if encoding == "text":
        return content.encode("utf-8", "surrogatepass")
    try:
        return base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequestError("content is not valid base64") from None


async def _chunks(data: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(data), WRITE_CHUNK_BYTES):
        yield data[start : start + WRITE_CHUNK_BYTES]


def register_file_tools(server: MCPServer, services: Services, helpers: McpHelpers) -> None:
    files = services.files

    @server.tool(
        name="file_read",
        description="Read a file from a byte offset: as UTF-8 text (invalid bytes replaced) or "
        "as base64 for binary files. Continue at `next_offset` until `eof`. " + POLICY_SENTENCE,
        annotations=READ_ONLY.model_copy(update={"title": "Read a file"}),
    )
    async def file_read(
        ctx: Context,
        path: Annotated[str, Field(description=PATH_DESCRIPTION)],
        offset: Annotated[int, Field(ge=0, description="Byte offset to start at.")] = 0,
        limit: Annotated[
            int, Field(ge=1, le=MAX_FILE_READ_BYTES, description="Most bytes to read.")
        ] = DEFAULT_FILE_READ_BYTES,
        encoding: Annotated[
            Encoding, Field(description="`text` (UTF-8) or `base64` (any bytes).")
        ] = "text",
        approval_wait: ApprovalWait = 30,
        approval_id: ApprovalId = None,
    ) -> Annotated[CallToolResult, FileReadResult]:
        try:
            outcome = await files.read_range(
                helpers.principal(ctx),
                path,
                offset=offset,
                limit=limit,
                approval_id=approval_id,
                approval_wait=approval_wait,
            )
        except AppError as error:
            return helpers.tool_error(error)
        if isinstance(outcome, Pending):
            return _pending_result(outcome, "file_read", path)
        data, size = outcome
        if encoding == "base64":
            text, used = base64.b64encode(data).decode("ascii"), len(data)
        else:
            text, used = decode_text_window(data, offset + len(data) >= size)
        result = FileReadResult(
            path=path,
            size=size,
            offset=offset,
            next_offset=offset + used,
            eof=offset + used >= size,
            encoding=encoding,
        )
        return CallToolResult(
            content=[TextContent(type="text", text=text)],
            structured_content=result.model_dump(mode="json"),
        )

    @server.tool(
        name="file_write",
        description="Create or replace a file with `content` (UTF-8 text, or base64 for any "
        "bytes). The file is replaced whole and at once: a reader never sees half of it. "
        "The directory must exist, unless parents=true (missing directories are made, each "
        "judged as a write). " + POLICY_SENTENCE,
        annotations=FILE_WRITE_ANNOTATIONS,
    )
    async def file_write(
        ctx: Context,
        path: Annotated[str, Field(description=PATH_DESCRIPTION)],
        content: Annotated[str, Field(description="The whole new content of the file.")],
        encoding: Annotated[
            Encoding, Field(description="How `content` is written: `text` or `base64`.")
        ] = "text",
        mode: Annotated[
            str | None,
            Field(
                max_length=8,
                description="Octal permissions such as `0644`, not setuid or setgid; "
                "default: the replaced file's less setuid and setgid, or 0644.",
            ),
        ] = None,
        approval_wait: ApprovalWait = 30,
        approval_id: ApprovalId = None,
        parents: Annotated[
            bool, Field(description="Make missing directories first, as `mkdir -p`.")
        ] = False,
    ) -> Annotated[CallToolResult, FileWriteResult]:
        try:
            data = _decode_content(content, encoding)
            outcome = await files.write(
                helpers.principal(ctx),
                path,
                _chunks(data),
                declared_size=len(data),
                mode=parse_mode(mode),
                approval_id=approval_id,
                approval_wait=approval_wait,
                parents=parents,
            )
        except AppError as error:
            return helpers.tool_error(error)
        if isinstance(outcome, Pending):
            return _pending_result(outcome, "file_write", path)
        result = FileWriteResult(
            path=outcome.path, size=outcome.size or 0, sha256=outcome.sha256, mode=outcome.mode
        )
        return CallToolResult(
            content=[TextContent(type="text", text=f"Wrote {result.size} bytes to {result.path}.")],
            structured_content=result.model_dump(mode="json"),
        )

    @server.tool(
        name="file_stat",
        description="Describe a file or directory: type, size, permissions, modification time, "
        "whether the path is a symlink, and (with `sha256: true`, files only) its hash. "
        + POLICY_SENTENCE,
        annotations=READ_ONLY.model_copy(update={"title": "Describe a file"}),
    )
    async def file_stat(
        ctx: Context,
        path: Annotated[str, Field(description=PATH_DESCRIPTION)],
        sha256: Annotated[bool, Field(description="Also hash the file (reads all of it).")] = False,
        approval_wait: ApprovalWait = 30,
        approval_id: ApprovalId = None,
    ) -> Annotated[CallToolResult, FileStatResult]:
        try:
            outcome = await files.stat(
                helpers.principal(ctx),
                path,
                sha256=sha256,
                approval_id=approval_id,
                approval_wait=approval_wait,
            )
        except AppError as error:
            return helpers.tool_error(error)
        if isinstance(outcome, Pending):
            return _pending_result(outcome, "file_stat", path)
        result = FileStatResult(
            path=outcome.path,
            resolved_path=outcome.resolved_path,
            type=outcome.type,
            size=outcome.size,
            mode=outcome.mode,
            mtime=outcome.mtime.isoformat(),
            symlink=outcome.symlink,
            sha256=outcome.sha256,
        )
        summary = f"{result.path}: {result.type}, {result.size} bytes, mode {result.mode}"
        return CallToolResult(
            content=[TextContent(type="text", text=summary)],
            structured_content=result.model_dump(mode="json"),
        )


def register_session_tools(server: MCPServer, services: Services, helpers: McpHelpers) -> None:
    sessions, executions = services.sessions, services.executions

    @server.tool(
        name="session_start",
        description="Start a persistent shell session: the exported variables, shell functions "
        "and aliases one session_run call leaves are there for the next; the working directory "
        "too with keep_cwd=true (else every call starts in the session's `cwd`). Returns the "
        "session id for session_run; end it with session_close.",
        annotations=SESSION_START_ANNOTATIONS,
    )
    async def session_start(
        ctx: Context,
        cwd: Annotated[
            str | None,
            Field(description="Starting directory (relative to the workspace; `~` expands)."),
        ] = None,
        env: Annotated[
            dict[str, str] | None,
            Field(description="Environment values of every call (judged by the policy)."),
        ] = None,
        timeout_ms: Annotated[
            int | None, Field(ge=1, description="Default deadline of each call, milliseconds.")
        ] = None,
        keep_cwd: Annotated[
            bool,
            Field(description="Each call starts in the directory the last one ended in."),
        ] = False,
    ) -> Annotated[CallToolResult, SessionResult]:
        try:
            fields: dict[str, object] = {"cwd": cwd, "env": env, "keep_cwd": keep_cwd}
            if timeout_ms is not None:
                fields["timeout_ms"] = timeout_ms
            body = SessionCreate.model_validate(fields)
            session = await sessions.create(helpers.principal(ctx), body)
            if isinstance(session, SessionPending):  # never: this tool asks no sandbox
                raise ConflictError("the session's sandbox awaits an approval")
        except AppError as error:
            return helpers.tool_error(error)
        except ValueError as error:
            return helpers.tool_error(InvalidRequestError(str(error)))
        result = SessionResult(id=session.id, cwd=session.cwd, timeout_ms=session.timeout_ms)
        return CallToolResult(
            content=[
                TextContent(
                    type="text",
                    text=f"Session {session.id} started in {session.cwd}. Pass this id to "
                    "session_run; call session_close when done.",
                )
            ],
            structured_content=result.model_dump(mode="json"),
        )

    @server.tool(
        name="session_run",
        description="Run a bash command inside a session started with session_start: it starts "
        "in the session's directory with the exported variables, functions and aliases earlier "
        "calls left, and leaves its own for the next. Answers like bash (the same policy, "
        "approvals and background jobs: job_wait follows a job or a held command, read_output "
        "pages through the full log).",
        annotations=SESSION_RUN_ANNOTATIONS,
    )
    async def session_run(
        ctx: Context,
        session: Annotated[str, Field(max_length=64, description="The id from session_start.")],
        command: Annotated[str, Field(description="The bash command.")],
        timeout: Annotated[  # noqa: ASYNC109 - the command's deadline, a tool input
            float | None,
            Field(allow_inf_nan=False, description="Seconds; default the session's timeout."),
        ] = None,
        approval_wait: Annotated[
            float,
            Field(
                ge=0,
                le=3600,
                allow_inf_nan=False,
                description="Seconds this call holds for a human decision when the policy asks "
                "for an approval (0: answer at once with the ids).",
            ),
        ] = 30,
        idle_timeout: Annotated[
            float | None,
            Field(gt=0, le=3600, allow_inf_nan=False, description=IDLE_TIMEOUT_DESCRIPTION),
        ] = None,
        idle_action: Annotated[
            Literal["background", "cancel"], Field(description="What `idle_timeout` does.")
        ] = "background",
        notify_url: Annotated[
            str | None, Field(max_length=2048, description=NOTIFY_URL_DESCRIPTION)
        ] = None,
        sandbox: Annotated[
            SandboxRequest | None,
            Field(
                description="Must stay within the session's sandbox profile (fixed at its "
                "creation); more is refused and nothing runs."
            ),
        ] = None,
    ) -> CallToolResult:
        try:
            principal = helpers.principal(ctx)
            if timeout is None:
                timeout = (await sessions.get(principal, session)).timeout_ms / 1000
            request = ExecutionCreate(
                command=command,
                session=session,
                timeout=timeout,
                approval_wait=approval_wait,
                idle_timeout=idle_timeout,
                idle_action=idle_action,
                notify_url=notify_url,
                sandbox=sandbox,
            )
            owner = await services.forwarder.session_owner(session)
            if owner is not None:
                on_owner = Owner(services.forwarder, owner, helpers.authorization(ctx))
                body = request.model_dump(mode="json", by_alias=True, exclude_none=True)
                return helpers.execution_result(
                    await on_owner.record("POST", "/v1/executions", body)
                )
            outcome = await executions.submit(principal, request)
        except AppError as error:
            return helpers.tool_error(error)
        except ValueError as error:
            return helpers.tool_error(InvalidRequestError(str(error)))
        return helpers.execution_result(outcome.execution)

    @server.tool(
        name="session_close",
        description="Close a session started with session_start: its shell state is discarded "
        "and a call still running in it is cancelled.",
        annotations=SESSION_CLOSE_ANNOTATIONS,
    )
    async def session_close(
        ctx: Context,
        session: Annotated[str, Field(max_length=64, description="The id from session_start.")],
    ) -> CallToolResult:
        try:
            owner = await services.forwarder.session_owner(session)
            if owner is None:
                await sessions.delete(helpers.principal(ctx), session)
            else:
                on_owner = Owner(services.forwarder, owner, helpers.authorization(ctx))
                await on_owner.ask("DELETE", f"/v1/sessions/{session}")
        except AppError as error:
            return helpers.tool_error(error)
        return CallToolResult(content=[TextContent(type="text", text=f"Session {session} closed.")])
