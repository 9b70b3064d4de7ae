"""The MCP endpoint (`/mcp`, streamable HTTP) for MCP clients: the `bash` tool and its job
tools, thin over the same use-cases as the REST API (`services.executions`).

`McpEndpoint` is the ASGI app routed at `/mcp`: it authenticates the bearer token like every
REST route, then hands the request to the SDK's streamable-HTTP app of the MCP server built for
the running app's Services (`serve`, entered by the app's lifespan).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Annotated, Literal, TypeVar

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from app import __version__
from app.api.errors import app_error_response
from app.api.mcp.forward import Owner
from app.api.mcp.tools import (
    IDLE_TIMEOUT_DESCRIPTION,
    NOTIFY_URL_DESCRIPTION,
    McpHelpers,
    register_file_tools,
    register_session_tools,
)
from app.core.asgi_replay import replay_body
from app.core.auth import Principal
from app.core.errors import AppError, PayloadTooLargeError, UnauthenticatedError, UnavailableError
from app.core.strict_json import TooManyValuesError, check_counts, json_body_limit
from app.executions.result_text import BACKGROUNDED_NOTICE
from app.executions.tool_description import APPROVAL_WAIT_DEFAULT, mcp_bash_description
from app.schemas import ExecutionCreate, ExecutionLimits, ExecutionPublic, SandboxRequest
from app.services import Services
from app.store.models import ExecutionState

T = TypeVar("T")

MCP_PATH = "/mcp"
MAX_WAIT_SECONDS = 60
MAX_READ_BYTES = 64 * 1024

INSTRUCTIONS = (
    "shellgate runs bash commands on this host under a policy: some commands are denied, some "
    "wait for a human approval. Long commands become background jobs; follow them with "
    "job_wait, stop them with job_cancel, and page through their full log with read_output. "
    "Move files with file_read, file_write and file_stat; keep a shell's state across calls "
    "with session_start, session_run and session_close."
)

TOOLS_DESCRIPTION = (
    "The names of the other tools you can call (for example `read`, `edit`, `grep`, `glob`, "
    "`write`). With the server's interceptor on, a command that one of those tools does better "
    "(`cat` of a file, `sed -i`, `grep`) is refused with a message naming the tool to use "
    "instead; leave this out and no command is refused for that reason."
)
APPROVAL_WAIT_DESCRIPTION = (
    "Seconds this call holds for a human decision when the policy asks for an approval "
    "(0: answer at once with the ids). Ignored with `async: true`."
)
# Honest hints for a client deciding whether to confirm a call: bash can do anything the
# server's user can, the network included; the job tools read or stop this server's executions.
BASH_ANNOTATIONS = ToolAnnotations(
    title="Run a bash command",
    read_only_hint=False,
    destructive_hint=True,
    idempotent_hint=False,
    open_world_hint=True,
)
JOB_WAIT_ANNOTATIONS = ToolAnnotations(
    title="Wait for an execution's result",
    read_only_hint=True,
    destructive_hint=False,
    idempotent_hint=True,
    open_world_hint=False,
)
# Cancelling kills a process group (destructive); a second cancel changes nothing more.
JOB_CANCEL_ANNOTATIONS = ToolAnnotations(
    title="Cancel an execution",
    read_only_hint=False,
    destructive_hint=True,
    idempotent_hint=True,
    open_world_hint=False,
)
READ_OUTPUT_ANNOTATIONS = ToolAnnotations(
    title="Read an execution's full log",
    read_only_hint=True,
    destructive_hint=False,
    idempotent_hint=True,
    open_world_hint=False,
)

# The endpoint requires a bearer token, which a DNS-rebinding page cannot present; behind a
# gateway the Host header is the gateway's, so the SDK's loopback-only Host check would refuse
# every legitimate call.
TRANSPORT_SECURITY = TransportSecuritySettings(enable_dns_rebinding_protection=False)


class ExecutionResult(BaseModel):
    """The structured part of an execution answer; the text block is the model-facing `text`."""

    id: str
    state: ExecutionState
    exit_code: int | None
    artifact: str = Field(description="`artifact://<id>`: the full log, readable with read_output.")
    approval_id: str | None = Field(
        default=None, description="The pending approval while the state is awaiting_approval."
    )


class OutputPageResult(BaseModel):
    next_offset: int = Field(description="Where the next read_output call starts.")
    total_bytes: int = Field(description="Bytes in the log so far.")
    complete: bool = Field(description="The execution has ended: the log will not grow.")


class PrincipalUser(AuthenticatedUser):
    """The caller as the SDK sees it: the SDK binds each MCP session to the identity that opened
    it (another token gets 404 for it), and the tools read the principal back from here."""

    def __init__(self, principal: Principal) -> None:
        super().__init__(AccessToken(token="", client_id=principal.name, scopes=[principal.role]))
        self.principal = principal


def _rest_description(field: str) -> str | None:
    """The REST field's description, so that the two schemas say the same thing."""
    return ExecutionCreate.model_fields[field].description


def build_mcp_server(services: Services) -> MCPServer:
    server: MCPServer = MCPServer(
        name="shellgate",
        version=__version__,
        instructions=INSTRUCTIONS,
        # MCPServer calls logging.basicConfig: a no-op under `shellgate serve`, which configures
        # logging first; anywhere else it must not switch the whole process to INFO.
        log_level="WARNING",
    )
    executions = services.executions

    async def execution_owner(ctx: Context, execution_id: str, action: str | None) -> Owner | None:
        """The replica running (or holding the log of) an execution when it is another one,
        called as this caller (app/api/mcp/forward.py); None: served here."""
        target = await services.forwarder.execution_owner(execution_id, action)
        return None if target is None else Owner(services.forwarder, target, _authorization(ctx))

    async def on_execution_owner(
        ctx: Context,
        execution_id: str,
        action: str,
        here: Callable[[], Awaitable[T]],
        there: Callable[[Owner], Awaitable[T | None]],
    ) -> T:
        """`there` on the replica the execution lives on, `here` when it is this one. `there`
        answers None when its owner is stopping and did not answer, and the record has ended
        since: the call then goes where a finished execution's goes, here or (a log on the
        owner's disk only) to the owner once more, as REST's does (ForwardToOwner.
        answer_without_owner)."""
        owner = await execution_owner(ctx, execution_id, action)
        answer = None if owner is None else await there(owner)
        if owner is not None and answer is None:
            owner = await execution_owner(ctx, execution_id, action)
            answer = None if owner is None else await there(replace(owner, last_try=True))
        return await here() if answer is None else answer

    @server.tool(
        name="bash",
        description=mcp_bash_description(services.settings),
        annotations=BASH_ANNOTATIONS,
    )
    async def bash(
        ctx: Context,
        command: Annotated[str, Field(description=_rest_description("command"))],
        # The command's deadline (a tool input), not a deadline of this coroutine.
        timeout: Annotated[  # noqa: ASYNC109
            float | None,
            Field(
                allow_inf_nan=False,
                description=_rest_description("timeout"),
                # What the server applies when it is left out (lower under a lower ceiling).
                json_schema_extra={"default": 300},
            ),
        ] = None,
        cwd: Annotated[str | None, Field(description=_rest_description("cwd"))] = None,
        env: Annotated[dict[str, str] | None, Field(description=_rest_description("env"))] = None,
        async_: Annotated[
            bool, Field(validation_alias="async", description=_rest_description("async_"))
        ] = False,
        tools: Annotated[
            list[str] | None,
            Field(max_length=64, description=TOOLS_DESCRIPTION),
        ] = None,
        approval_wait: Annotated[
            float, Field(ge=0, le=3600, allow_inf_nan=False, description=APPROVAL_WAIT_DESCRIPTION)
        ] = APPROVAL_WAIT_DEFAULT,
        limits: Annotated[
            ExecutionLimits | None, Field(description=_rest_description("limits"))
        ] = None,
        idle_timeout: Annotated[
            float | None,
            Field(gt=0, le=3600, allow_inf_nan=False, description=IDLE_TIMEOUT_DESCRIPTION),
        ] = None,
        idle_action: Annotated[
            Literal["background", "cancel"], Field(description=_rest_description("idle_action"))
        ] = "background",
        notify_url: Annotated[
            str | None, Field(max_length=2048, description=NOTIFY_URL_DESCRIPTION)
        ] = None,
        sandbox: Annotated[
            SandboxRequest | None, Field(description=_rest_description("sandbox"))
        ] = None,
    ) -> Annotated[CallToolResult, ExecutionResult]:
        # Left out when not given: the server's default then applies without a clamp notice.
        asked = {} if timeout is None else {"timeout": timeout}
        request = ExecutionCreate(
            command=command,
            **asked,
            cwd=cwd,
            env=env,
            async_=async_,
            tools=tools,
            limits=limits,
            approval_wait=approval_wait,
            idle_timeout=idle_timeout,
            idle_action=idle_action,
            notify_url=notify_url,
            sandbox=sandbox,
        )
        try:
            outcome = await executions.submit(_principal(ctx), request)
        except AppError as error:
            return _tool_error(error)
        return _execution_result(outcome.execution)

    @server.tool(
        name="job_wait",
        description="Wait up to `seconds` for an execution (a background job, or a command "
        "awaiting approval) to finish, and return its result; while it still runs, the output "
        "so far.",
        annotations=JOB_WAIT_ANNOTATIONS,
    )
    async def job_wait(
        ctx: Context,
        id: Annotated[str, Field(description="The execution id (ex_…).")],
        seconds: Annotated[
            float,
            Field(ge=0, le=MAX_WAIT_SECONDS, description="The longest wait; 0 reads at once."),
        ] = 30,
    ) -> Annotated[CallToolResult, ExecutionResult]:
        try:
            principal = _principal(ctx)
            deadline = asyncio.get_running_loop().time() + seconds
            # A run on another replica changes state there: its owner holds the wait. One that
            # is stopping, or does not answer, does not: the wait here follows its record in
            # the database for what is left of `seconds`, as a REST long-poll's does.
            owner = await execution_owner(ctx, id, None) if seconds > 0 else None
            execution = None if owner is None else await owner.wait(id, seconds)
            if execution is None:
                left = max(0.0, deadline - asyncio.get_running_loop().time())
                execution = await executions.get(principal, id, wait=left)
        except AppError as error:
            return _tool_error(error)
        return _execution_result(execution)

    @server.tool(
        name="job_cancel",
        description="Cancel a running execution (its whole process group is terminated) or one "
        "awaiting approval; returns its final result.",
        annotations=JOB_CANCEL_ANNOTATIONS,
    )
    async def job_cancel(
        ctx: Context, id: Annotated[str, Field(description="The execution id (ex_…).")]
    ) -> Annotated[CallToolResult, ExecutionResult]:
        try:
            principal = _principal(ctx)
            # Its process group is on the replica that runs it.
            execution = await on_execution_owner(
                ctx,
                id,
                "cancel",
                lambda: executions.cancel(principal, id),
                lambda owner: owner.cancel(id),
            )
        except AppError as error:
            return _tool_error(error)
        # The cancel asked for is done: a success for the tool, whatever the command's state.
        return _execution_result(execution, cancelled_on_request=True)

    @server.tool(
        name="read_output",
        description="Read an execution's full raw log (artifact://<id>: stdout and stderr merged, "
        "nothing elided) from a byte offset, as UTF-8 text; continue at `next_offset` until "
        "`complete` is true and `next_offset` reaches `total_bytes`.",
        annotations=READ_OUTPUT_ANNOTATIONS,
    )
    async def read_output(
        ctx: Context,
        id: Annotated[str, Field(description="The execution id (ex_…).")],
        offset: Annotated[int, Field(ge=0, description="Byte offset in the log.")] = 0,
        limit: Annotated[int, Field(ge=1, le=MAX_READ_BYTES, description="Most bytes to read.")] = (
            MAX_READ_BYTES
        ),
    ) -> Annotated[CallToolResult, OutputPageResult]:
        try:
            principal = _principal(ctx)
            # A log still being written on another replica (without a shared data dir) is there.
            page = await on_execution_owner(
                ctx,
                id,
                "output",
                lambda: executions.read_output(principal, id, offset, limit),
                lambda owner: owner.output(id, offset, limit),
            )
        except AppError as error:
            return _tool_error(error)
        text, next_offset = _decode_page(
            page.data, page.next_offset, page.complete, page.total_bytes
        )
        result = OutputPageResult(
            next_offset=next_offset, total_bytes=page.total_bytes, complete=page.complete
        )
        return CallToolResult(
            content=[TextContent(type="text", text=text)],
            structured_content=result.model_dump(mode="json"),
        )

    helpers = McpHelpers(
        principal=_principal,
        execution_result=_execution_result,
        tool_error=_tool_error,
        authorization=_authorization,
    )
    register_file_tools(server, services, helpers)
    register_session_tools(server, services, helpers)
    _forbid_unknown_arguments(server)
    return server


def _forbid_unknown_arguments(server: MCPServer) -> None:
    """REST refuses a field it does not know (docs/api.md, Conventions); the MCP SDK drops one
    silently, so `{"command": "make clean", "workdir": "/src"}` ran in the workspace root and
    `{"asynch": true}` in the foreground. Every tool's arguments are strict too, and its input
    schema says so (`additionalProperties: false`)."""
    for tool in server._tool_manager.list_tools():
        model = tool.fn_metadata.arg_model
        model.model_config["extra"] = "forbid"
        model.model_rebuild(force=True)
        tool.parameters["additionalProperties"] = False


def _principal(ctx: Context) -> Principal:
    request = ctx.request_context.request
    user = request.scope.get("user") if isinstance(request, Request) else None
    if not isinstance(user, PrincipalUser):
        # McpEndpoint authenticates every request; reaching a tool without it is a wiring bug.
        raise UnauthenticatedError("missing bearer token")
    return user.principal


def _authorization(ctx: Context) -> str:
    request = ctx.request_context.request
    header = request.headers.get("authorization") if isinstance(request, Request) else None
    if not header:
        raise UnauthenticatedError("missing bearer token")  # as _principal: a wiring bug
    return str(header)


def _tool_error(error: AppError) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=error.message)], is_error=True)


def _execution_result(
    execution: ExecutionPublic, *, cancelled_on_request: bool = False
) -> CallToolResult:
    approval_id = None
    text = execution.text
    if execution.state is ExecutionState.awaiting_approval:
        approval = execution.approval
        approval_id = approval.id if approval else None
        reason = f": {approval.reason}" if approval else ""
        text = (
            f"Command awaits a human approval (approval {approval_id}{reason}). "
            f"Call job_wait with id {execution.id} to get its result once it is decided."
        )
    elif not execution.state.is_terminal:
        # The REST text promises automatic delivery; over MCP the model collects it itself, so
        # that promise is left out.
        promised = BACKGROUNDED_NOTICE.format(id=execution.id)
        text = text.replace(promised, f"Backgrounded as job {execution.id}.")
        text = (
            f"{text}\n\nJob {execution.id} is still {execution.state.value}: call job_wait with "
            "this id for the result, or job_cancel to stop it."
        )
    result = ExecutionResult(
        id=execution.id,
        state=execution.state,
        exit_code=execution.exit_code,
        artifact=execution.artifact,
        approval_id=approval_id,
    )
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=result.model_dump(mode="json"),
        # A failing command is data, flagged exactly as REST's `is_error` flags it; except the
        # cancel a job_cancel asked for, which is that tool's success.
        is_error=execution.is_error and not cancelled_on_request,
    )


def _decode_page(data: bytes, next_offset: int, complete: bool, total: int) -> tuple[str, int]:
    """UTF-8 text of a page, with replacement for invalid bytes. A character cut by the page
    end is left for the next page (`next_offset` moves back), so paging never garbles text."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text = decoder.decode(data, final=False)
    cut = len(decoder.getstate()[0])
    at_end = complete and next_offset >= total
    if cut == 0 or cut == len(data) or at_end:
        return text + decoder.decode(b"", final=True), next_offset
    return text, next_offset - cut


class McpEndpoint:
    """The ASGI app at `/mcp`: 401 with the API's error envelope unless the bearer token is
    valid, else the MCP server of the running app with the caller attached to the request."""

    def __init__(self) -> None:
        self._running: tuple[Services, ASGIApp] | None = None

    @contextlib.asynccontextmanager
    async def serve(self, services: Services) -> AsyncIterator[None]:
        """Run the MCP server for these Services for as long as the app's lifespan lasts."""
        server = build_mcp_server(services)
        http_app = server.streamable_http_app(
            streamable_http_path=MCP_PATH, transport_security=TRANSPORT_SECURITY
        )
        # Mounted inside another app, the SDK's app gets no lifespan of its own: its session
        # manager runs here (one manager per lifespan: it cannot be restarted).
        async with server.session_manager.run():
            self._running = (services, http_app)
            try:
                yield
            finally:
                self._running = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._running is None:
            error: AppError = UnavailableError("the MCP endpoint is not running")
            await app_error_response(error)(scope, receive, send)
            return
        services, http_app = self._running
        try:
            principal = await services.tokens.authenticate(_bearer_secret(Headers(scope=scope)))
        except (UnauthenticatedError, UnavailableError) as refused:  # unavailable: the issuer
            await app_error_response(refused)(scope, receive, send)
            return
        if scope["type"] == "http" and scope["method"] == "POST":
            limit = json_body_limit(services.settings.max_command_bytes)
            body = await _bounded_body(scope, receive, send, limit)
            if body is None:
                return
            receive = replay_body(body, receive)
        await http_app({**scope, "user": PrincipalUser(principal)}, receive, send)


async def _bounded_body(scope: Scope, receive: Receive, send: Send, limit: int) -> bytes | None:
    """The body of a POST, read as the REST routes read theirs (app/api/strict_route.py): the
    SDK parses it on the event loop, up to its own 4 MiB, and 3 MiB of `[[],…]` stalled every
    client 0.7 s (RELIABILITY.md, "One request against all the others"). None once a refusal
    was sent: 413 `too_large` past `limit`, a JSON-RPC parse error past the value counts."""
    declared = Headers(scope=scope).get("content-length", "")
    chunks: list[bytes] = []
    size = int(declared) if declared.isdigit() else 0
    while size <= limit:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)  # the client left: the SDK sees the same
        chunks.append(message.get("body", b""))
        size = max(size, sum(len(chunk) for chunk in chunks))
        if size <= limit and not message.get("more_body", False):
            body = b"".join(chunks)
            try:
                check_counts(body.decode("utf-8", "replace"))
            except TooManyValuesError as error:
                refusal = {"code": -32700, "message": f"Parse error: {error.msg}"}
                answer = {"jsonrpc": "2.0", "id": None, "error": refusal}
                await JSONResponse(answer, status_code=400)(scope, receive, send)
                return None
            return body
    too_large = PayloadTooLargeError(f"The request body is larger than {limit} bytes.")
    await app_error_response(too_large)(scope, receive, send)
    return None


def _bearer_secret(headers: Headers) -> str | None:
    header = headers.get("authorization")
    if not header:
        return None
    scheme, _, secret = header.partition(" ")
    if scheme.lower() != "bearer":
        raise UnauthenticatedError("the Authorization header must be a Bearer token")
    return secret.strip()
