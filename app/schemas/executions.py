"""Wire models of executions: the request, its limits, the public view and its input frames."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.config import JsonDict

from app.schemas.common import StrictModel
from app.schemas.sandbox import SandboxRecord, SandboxRequest
from app.store.models import ApprovalState, ExecutionMode, ExecutionState

# The largest value each limit can mean to every backend (a cgroup file, setrlimit's C long,
# bash's `ulimit` in 1 KiB blocks): beyond it a value wrapped to a tiny limit, failed the spawn
# or raised out of it (a 500), even on a server with no limit of its own to compare with.
LIMIT_MAX_MB = 2**40  # 1 EiB in bytes, well inside 2**63
LIMIT_MAX_SECONDS = 2**40
LIMIT_MAX_PROCESSES = 4_194_304  # the kernel's PID_MAX_LIMIT (a cgroup's pids.max)
LIMIT_MAX_OPEN_FILES = 2**30  # a C int with room; the host's nr_open may hold less


class ExecutionLimits(StrictModel):
    """Per-execution resource limits; each may only lower the server's (`GET /v1/info`)."""

    memory_mb: int | None = Field(
        default=None, ge=1, le=LIMIT_MAX_MB, description="Memory of the whole tree, MB."
    )
    processes: int | None = Field(
        default=None,
        ge=1,
        le=LIMIT_MAX_PROCESSES,
        description="Processes (and threads) alive at once in the tree.",
    )
    cpu_seconds: int | None = Field(
        default=None, ge=1, le=LIMIT_MAX_SECONDS, description="CPU time, seconds."
    )
    file_size_mb: int | None = Field(
        default=None, ge=1, le=LIMIT_MAX_MB, description="Largest file written, MB."
    )
    open_files: int | None = Field(
        default=None, ge=1, le=LIMIT_MAX_OPEN_FILES, description="Open files per process."
    )


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
    notify_url: str | None = Field(
        default=None,
        max_length=2048,
        description="POST the terminal record here, signed (`X-Shellgate-Signature`); must "
        "match SHELLGATE_NOTIFY_ALLOW. Default: SHELLGATE_NOTIFY_URL.",
    )
    idle_timeout: float | None = Field(
        default=None,
        gt=0,
        le=3600,
        description="Seconds without any output after which the call answers (the command "
        "goes on as a job) or, with `idle_action: cancel`, the command is cancelled.",
    )
    idle_action: Literal["background", "cancel"] = Field(
        default="background", description="What `idle_timeout` does."
    )
    sandbox: SandboxRequest | None = Field(
        default=None,
        description="More than the policy's sandbox profile for this run: beyond it, an "
        "approval of kind `sandbox` (or 403 under `escalation: deny`); in a session, more "
        "than the session's profile is a 409.",
    )


class NotificationAttempt(BaseModel):
    """One POST of the terminal record to `notify_url`."""

    at: datetime
    status_code: int | None = Field(description="The receiver's HTTP status (null: no answer).")
    error: str | None = Field(description="Why the attempt failed (null: a 2xx).")
    duration_ms: float


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
    "notify_url": None,
    "notify_state": None,
    "notifications": [],
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
    node: str | None = Field(
        default=None,
        description="The replica that runs it, or holds it for approval (GET /v1/nodes).",
    )
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
    sandbox: SandboxRecord | None = Field(
        default=None,
        description="The sandbox profile it ran with (null: it ran unsandboxed, "
        "SHELLGATE_SANDBOX=off, or it never ran).",
    )
    is_error: bool
    text: str
    approval: ApprovalSummary | None = None
    reason: str | None = Field(
        default=None,
        description="The policy's reason for its verdict: `Allowed by bash pattern: …`, "
        "`Allowed by remembered rule rr_…: …`, or the prompt's reason when it waited for an "
        "approval (null for records from before it was kept).",
    )
    remembered_rule: str | None = Field(
        default=None,
        description="The remembered rule (`rr_…`, GET /v1/policy `remembered`) that let it run "
        "without a prompt; null otherwise.",
    )
    notify_url: str | None = Field(default=None, description="Where the end is delivered.")
    notify_state: Literal["waiting", "delivered", "failed"] | None = Field(
        default=None,
        description="waiting (not ended, or retrying), delivered, failed (gave up); "
        "null without notify_url.",
    )
    notifications: list[NotificationAttempt] = Field(
        default_factory=list, description="Every delivery attempt so far, oldest first."
    )
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class ExecutionsPublic(BaseModel):
    data: list[ExecutionPublic]
    next_cursor: str | None


class OutputMatch(BaseModel):
    offset: int = Field(description="The match's byte offset in the log, as `/output` counts.")
    line: int | None = Field(
        description="Its 1-based line number; null past the evicted middle of a log over the "
        "artifact cap, whose lines were never counted."
    )
    text: str = Field(
        description="The line as text (UTF-8, terminal escapes removed), cut to a window of "
        "240 characters around the match."
    )


class OutputSearch(BaseModel):
    """`GET /v1/executions/{id}/search`: the lines of the whole log holding `q`."""

    query: str
    matches: list[OutputMatch] = Field(description="In log order, one per line.")
    truncated: bool = Field(description="More lines matched than `limit`: search further on.")
    skipped: list[int] | None = Field(
        description="`[start, end)` of the evicted middle of a log over the cap, not searched."
    )
    total_bytes: int = Field(description="The log's size when it was searched.")
    complete: bool = Field(description="The execution had ended: the log will not grow.")


class ExecutionInput(StrictModel):
    data: str = Field(max_length=1024 * 1024)


class ExecutionResize(StrictModel):
    rows: int
    cols: int
