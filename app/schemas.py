"""Wire models: what clients send and receive. Persistence models live in `models.py`."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel
from pydantic.config import JsonDict

from app.models import ApprovalState, ExecutionMode, ExecutionState
from app.policy import PolicyDocument, PolicyRule, RuleAction


class StrictModel(BaseModel):
    # No NaN or ±Infinity in any number a client sends (a timeout of Infinity used to run).
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ExecutionLimits(StrictModel):
    """Per-execution resource limits; each may only lower the server's (`GET /v1/info`)."""

    memory_mb: int | None = Field(default=None, ge=1, description="Memory of the whole tree, MB.")
    processes: int | None = Field(
        default=None, ge=1, description="Processes (and threads) alive at once in the tree."
    )
    cpu_seconds: int | None = Field(default=None, ge=1, description="CPU time, seconds.")
    file_size_mb: int | None = Field(default=None, ge=1, description="Largest file written, MB.")
    open_files: int | None = Field(default=None, ge=1, description="Open files per process.")


class ExecutionCreate(StrictModel):
    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        allow_inf_nan=False,
        json_schema_extra={
            "examples": [
                {"command": "echo hello; uname -s"},
                {"command": "echo building && echo done", "async": True, "timeout": 600},
                {"command": "echo $GREETING", "env": {"GREETING": "hi"}, "cwd": "~"},
            ]
        },
    )

    command: str = Field(description="Shell text, run as `bash -c <command>`.")
    env: dict[str, str] | None = Field(
        default=None,
        description="Extra environment values (never parsed as shell text); every name is "
        "judged by the policy's env rules (BASH_ENV, PATH, LD_* and the like are denied).",
    )
    timeout: float = Field(
        default=300,
        description="Seconds; 0 disables the deadline; otherwise clamped to 1..3600.",
    )
    cwd: str | None = Field(default=None, description="Working directory (`~` expands).")
    pty: bool = False
    async_: bool = Field(default=False, alias="async", description="Start as a background job.")
    session: str | None = Field(default=None, max_length=64)
    tools: list[str] | None = Field(default=None, max_length=64)
    rows: int = Field(default=40, description="PTY rows, clamped to 5..200.")
    cols: int = Field(default=120, description="PTY columns, clamped to 20..400.")
    approval_wait: float = Field(
        default=30,
        ge=0,
        le=3600,
        description="Seconds a foreground call waits for an approval before answering 202.",
    )
    limits: ExecutionLimits | None = Field(
        default=None, description="Resource limits of this run (only lower than the server's)."
    )


class ApprovalSummary(BaseModel):
    id: str
    state: ApprovalState
    reason: str
    expires_at: datetime


EXECUTION_EXAMPLE: JsonDict = {
    "id": "ex_8q3Zb1xvT0m2hC4rNw7Y",
    "state": "completed",
    "mode": "foreground",
    "owner": "alice",
    "command": "echo hello",
    "cwd": "/srv/work",
    "pty": False,
    "session": None,
    "exit_code": 0,
    "signal": None,
    "timed_out": False,
    "output": "hello\n",
    "truncated": False,
    "total_bytes": 6,
    "total_lines": 1,
    "output_bytes": 6,
    "output_lines": 1,
    "elided_bytes": 0,
    "artifact": "artifact://ex_8q3Zb1xvT0m2hC4rNw7Y",
    "wall_time_ms": 4.2,
    "timeout_seconds": 300,
    "requested_timeout_seconds": None,
    "timeout_disabled": None,
    "notices": [],
    "is_error": False,
    "text": "hello\n\nWall time: 0.00 seconds",
    "approval": None,
    "created_at": "2026-01-05T10:00:00Z",
    "started_at": "2026-01-05T10:00:00Z",
    "finished_at": "2026-01-05T10:00:00Z",
}


class ExecutionPublic(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [EXECUTION_EXAMPLE]})

    id: str
    state: ExecutionState
    mode: ExecutionMode
    owner: str
    command: str
    cwd: str
    pty: bool
    session: str | None = None
    exit_code: int | None
    signal: int | None
    timed_out: bool
    output: str
    truncated: bool
    total_bytes: int
    total_lines: int
    output_bytes: int
    output_lines: int
    elided_bytes: int
    artifact: str
    wall_time_ms: float | None
    timeout_seconds: float | None
    requested_timeout_seconds: float | None = None
    timeout_disabled: bool | None = None
    notices: list[str]
    limits: dict[str, int | None] | None = Field(
        default=None, description="The limits this run had (null: none recorded)."
    )
    confinement: str | None = Field(
        default=None, description="How they were enforced: cgroup2, cgroup1 or rlimit."
    )
    is_error: bool
    text: str
    approval: ApprovalSummary | None = None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class ExecutionsPublic(BaseModel):
    data: list[ExecutionPublic]
    next_cursor: str | None


class ExecutionInput(StrictModel):
    data: str = Field(max_length=1024 * 1024)


class ExecutionResize(StrictModel):
    rows: int
    cols: int


class ApprovalPublic(BaseModel):
    id: str
    execution_id: str
    command: str
    cwd: str
    env: dict[str, str] = Field(
        description="Every environment value the command will get from the request and its "
        "session (session env overlaid by the call's), exactly as it will run."
    )
    session: str | None = Field(description="The session the command runs in, if any.")
    pty: bool = Field(description="The command runs in a pseudo-terminal (it may read input).")
    reason: str
    state: ApprovalState
    requested_by: str
    decided_by: str | None
    decision_reason: str | None
    created_at: datetime
    decided_at: datetime | None
    expires_at: datetime


class ApprovalsPublic(BaseModel):
    data: list[ApprovalPublic]


class ApprovalDecision(StrictModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"reason": "expected cleanup"}]}
    )

    reason: str | None = Field(
        default=None,
        max_length=4096,
        description="Stored with the decision and shown to the agent.",
    )


class ErrorBody(BaseModel):
    code: str = Field(description="Machine-readable error code, e.g. `policy_denied`.")
    message: str = Field(description="What went wrong, for a human or an agent to read.")
    details: dict[str, Any] = Field(
        default_factory=dict, description="Structured context (the matched rule, ids, limits)."
    )
    request_id: str | None = Field(
        default=None,
        description="The request's id (the `X-Request-ID` response header): the key to the "
        "server's log lines about it.",
    )


class ErrorResponse(BaseModel):
    """Every refusal but request-shape validation: `{"error": {code, message, details,
    request_id}}`."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "error": {
                        "code": "policy_denied",
                        "message": "Blocked by bash pattern: rm -rf *",
                        "details": {"rule": "rm -rf *"},
                        "request_id": "5f0c3e0b8a8e4d3f9b1d2c7a6e4f8a90",
                    }
                }
            ]
        }
    )

    error: ErrorBody


class ValidationIssue(BaseModel):
    """One problem pydantic found in the request (FastAPI's shape)."""

    loc: list[str | int] = Field(description="Where: `body`, `query`, `path`, then field names.")
    msg: str
    type: str
    input: Any = None
    ctx: dict[str, Any] | None = None


class RequestValidationErrorResponse(BaseModel):
    """A body, query or path value that does not fit its schema (FastAPI's 422 shape)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "detail": [
                        {
                            "type": "missing",
                            "loc": ["body", "command"],
                            "msg": "Field required",
                            "input": {},
                        }
                    ]
                }
            ]
        }
    )

    detail: list[ValidationIssue]


class UnprocessableResponse(RootModel[RequestValidationErrorResponse | ErrorResponse]):
    """A 422: `{"detail": [...]}` when the request does not fit its schema, `{"error": ...}`
    when the server refuses a well-formed value (`invalid_request`, `intercepted`)."""


class ToolObject(BaseModel):
    """An MCP tool object (name, description, inputSchema)."""

    model_config = ConfigDict(populate_by_name=True)

    name: str
    description: str
    input_schema: dict[str, Any] = Field(alias="inputSchema")


class Health(BaseModel):
    status: Literal["ok"]


class Info(BaseModel):
    version: str
    max_jobs: int
    running_jobs: int
    limits: dict[str, Any]
    confinement: Literal["cgroup2", "cgroup1", "rlimit"]
    execution_limits: dict[str, int | None] = Field(
        description="The server's per-execution limits (null: none); requests may only lower them."
    )


class WsTicket(BaseModel):
    ticket: str
    expires_at: datetime


# --- sessions and the streaming runner (docs/streaming.md#sessions) ---------------------------

SESSION_DEFAULT_TIMEOUT_MS = 600_000
# The runner has no upper bound of its own; a day keeps a forgotten call from running forever.
SESSION_MAX_TIMEOUT_MS = 24 * 60 * 60 * 1000


class SessionCreate(StrictModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"env": {"PROJECT": "demo"}, "timeout_ms": 120000}]},
    )

    cwd: str | None = Field(
        default=None,
        description="Working directory at the start of every call (`~` expands; relative to "
        "the workspace root; default the workspace root).",
    )
    env: dict[str, str] | None = Field(
        default=None,
        description="Environment values of every call (never parsed as shell text); judged by "
        "the policy's env rules now and again at every call.",
    )
    timeout_ms: int = Field(
        default=SESSION_DEFAULT_TIMEOUT_MS,
        ge=1,
        le=SESSION_MAX_TIMEOUT_MS,
        description="Deadline of each `/run` call; a call may only raise it.",
    )
    pty: bool = Field(default=False, description="Run the calls in a pseudo-terminal.")
    limits: ExecutionLimits | None = Field(
        default=None, description="Resource limits of every call (only lower than the server's)."
    )


class SessionPatch(StrictModel):
    """Fields left out keep their value; `env` replaces the whole environment."""

    cwd: str | None = None
    env: dict[str, str] | None = None
    timeout_ms: int | None = Field(default=None, ge=1, le=SESSION_MAX_TIMEOUT_MS)
    pty: bool | None = None
    limits: ExecutionLimits | None = Field(
        default=None, description="Replaces the session's limits (`{}` clears them)."
    )


class SessionPublic(BaseModel):
    id: str
    owner: str
    cwd: str
    env: dict[str, str]
    timeout_ms: int
    pty: bool
    limits: dict[str, int] = Field(default_factory=dict, description="Limits of every call.")
    busy: bool = Field(description="A call holds the session's shell state right now.")
    created_at: datetime
    updated_at: datetime
    tool: ToolObject


class SessionsPublic(BaseModel):
    data: list[SessionPublic]


class RunRequest(StrictModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"command": "echo $PROJECT"}]}
    )

    command: str = Field(description="Shell text; must not start with `/`.")
    timeout_ms: int | None = Field(
        default=None,
        description="Per-call deadline in milliseconds; must be strictly greater than the "
        "session's timeout_ms (it can only raise it).",
    )


class RunItem(BaseModel):
    """One NDJSON line of `POST /v1/sessions/{id}/run`."""

    stdout: str
    stderr: str
    exit_code: int | None
    signal: int | None
    truncated: bool
    encoding: Literal["base64"] | None = Field(
        default=None, description="Present when the chunk is not valid UTF-8."
    )


# --- WebSocket client → server frames (docs/streaming.md#client-frames) ------------------------


class WsInputFrame(StrictModel):
    """Keystrokes for a PTY run; `encoding: base64` carries bytes that are not UTF-8."""

    type: Literal["input"]
    data: str = Field(max_length=1024 * 1024)
    encoding: Literal["utf-8", "base64"] = "utf-8"


class WsResizeFrame(StrictModel):
    type: Literal["resize"]
    rows: int = Field(description="Clamped to 5..200.")
    cols: int = Field(description="Clamped to 20..400.")


class WsSignalFrame(StrictModel):
    """A signal to the whole process group; TERM and KILL end the run as `cancelled`."""

    type: Literal["signal"]
    signal: Literal["INT", "TERM", "KILL", "HUP", "QUIT"]


class WsPingFrame(StrictModel):
    """An application-level ping; the server answers `{"type": "pong"}`."""

    type: Literal["ping"]


WsClientFrame = Annotated[
    WsInputFrame | WsResizeFrame | WsSignalFrame | WsPingFrame, Field(discriminator="type")
]


# --- the policy (docs/policy.md#policy-api) -----------------------------------------------------


class PolicyEvaluate(StrictModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"command": "cd /srv && rm -rf build", "tools": [], "env": {"GREETING": "hi"}}
            ]
        },
    )

    command: str = Field(
        max_length=1024 * 1024, description="The command as an agent would send it."
    )
    tools: list[str] | None = Field(
        default=None, max_length=64, description="The caller's dedicated tools (interceptor)."
    )
    env: dict[str, str] | None = Field(
        default=None,
        description="The `env` an agent would send; its names are judged by the env rules.",
    )
    cwd: str | None = Field(
        default=None,
        description="As in POST /v1/executions: the working directory (critical patterns judge "
        "`.` and `*` against it); when absent, a leading `cd <dir> &&` is rewritten and the "
        "interceptor also sees the rest of the command.",
    )


class InterceptionPublic(BaseModel):
    tool: str
    message: str


class CdRewrite(BaseModel):
    cwd: str
    command: str


class EnvVerdictPublic(BaseModel):
    name: str
    verdict: RuleAction = Field(description="allow | prompt | deny")
    rule: str | None = Field(description="The env glob that decided; null for allow.")


class PolicyEvaluation(BaseModel):
    verdict: RuleAction = Field(
        description="allow | prompt | deny: what submit would do, the stricter of the "
        "command's verdict and the env verdict."
    )
    reason: str
    command_verdict: RuleAction = Field(description="The command's verdict alone.")
    matched_rule: PolicyRule | None
    matched_segment: str | None = Field(
        description="What the matched rule applied to: the whole command or one of `segments`."
    )
    segments: list[str]
    critical_hits: list[str] = Field(description="Names of the critical patterns found.")
    unreadable_reasons: list[str] = Field(
        description="Why parts of the command cannot be read statically (empty: none)."
    )
    parse_error: str | None
    env_verdict: RuleAction = Field(description="The strictest verdict over the env names.")
    env: list[EnvVerdictPublic] = Field(description="Each env name's verdict, in request order.")
    cwd: str = Field(
        description="The working directory the command was judged in: the request's cwd or "
        "the leading-`cd` target, resolved against the workspace root."
    )
    cd_rewrite: CdRewrite | None = Field(
        description="The leading-`cd` rewrite submit would apply (null: none)."
    )
    interception: InterceptionPublic | None = Field(
        description="What the interceptor would block; null when nothing would, or when the "
        "verdict is deny (deny never reaches the interceptor; prompt reaches it on approval)."
    )


class PolicyVersionPublic(BaseModel):
    id: int
    author: str
    created_at: datetime
    document: PolicyDocument


class PolicyVersionsPublic(BaseModel):
    data: list[PolicyVersionPublic] = Field(description="Newest first; the first is in force.")
