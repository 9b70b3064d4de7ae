"""Typed results: pydantic models mirroring the JSON the API answers (docs/api.md). They keep
fields a newer server adds (`extra="allow"`), so an SDK older than its server still parses it;
tests/sdk/test_models_mirror_api.py checks every field of openapi.json is declared here."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# States that never change again (docs/api.md#execution-states).
TERMINAL_STATES = frozenset({"completed", "failed", "timed_out", "cancelled", "rejected", "lost"})


class WireModel(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class ApprovalSummary(WireModel):
    id: str
    state: str
    reason: str
    expires_at: datetime


class NotificationAttempt(WireModel):
    """One delivery of the terminal record to `notify_url`."""

    at: datetime
    status_code: int | None
    error: str | None
    duration_ms: float


class Execution(WireModel):
    """One execution record, as `GET /v1/executions/{id}` answers it."""

    id: str
    state: str
    mode: str
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
    limits: dict[str, int | None] | None = None
    confinement: str | None = None
    is_error: bool
    text: str
    approval: ApprovalSummary | None = None
    notify_url: str | None = None
    notify_state: str | None = None  # waiting, delivered, failed (docs/api.md)
    notifications: list[NotificationAttempt] = []
    node: str | None = None  # the replica that runs it (docs/operations.md, several replicas)
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @property
    def is_terminal(self) -> bool:
        """True once the state can no longer change."""
        return self.state in TERMINAL_STATES

    # Fields newer than this SDK's typed view are kept as the server sent them.
    sandbox: dict[str, Any] | None = None  # the kernel boundary it ran in
    reason: str | None = None  # why the policy decided as it did
    remembered_rule: str | None = None  # the remembered approval that allowed it


class ExecutionPage(WireModel):
    data: list[Execution]
    next_cursor: str | None


class OutputChunk(WireModel):
    """Raw log bytes read by offset (`GET /v1/executions/{id}/output`)."""

    data: bytes
    offset: int
    next_offset: int
    total_bytes: int
    complete: bool

    @property
    def at_end(self) -> bool:
        """The log is final and everything up to its end has been read."""
        return self.complete and self.next_offset >= self.total_bytes


class Approval(WireModel):
    id: str
    # What waits for it: `execution` (execution_id), `file_operation` (file_operation_id), or
    # `session`, a new session's sandbox request (neither id: the session is not made yet).
    subject: str = "execution"
    execution_id: str | None
    file_operation_id: str | None = None
    command: str
    cwd: str
    env: dict[str, str]
    session: str | None
    pty: bool
    reason: str
    # What is asked: `command`, `file`, or `sandbox` (a profile beyond the policy's, whose
    # `sandbox_request` says what is asked beyond it and why).
    kind: str = "command"
    sandbox_request: dict[str, Any] | None = None
    state: str
    requested_by: str
    decided_by: str | None
    decision_reason: str | None
    created_at: datetime
    decided_at: datetime | None
    expires_at: datetime
    suggested_pattern: str | None = None  # what "remember" proposes
    remembered_rule: str | None = None  # the rule a "remember" decision made


class ApprovalList(WireModel):
    data: list[Approval]


class ToolObject(WireModel):
    name: str
    description: str
    input_schema: dict[str, Any] = Field(alias="inputSchema")


class Session(WireModel):
    id: str
    owner: str
    cwd: str
    env: dict[str, str]
    timeout_ms: int
    pty: bool
    keep_cwd: bool = False  # each call starts where the last one ended
    limits: dict[str, int] = Field(default_factory=dict)
    busy: bool
    created_at: datetime
    updated_at: datetime
    tool: ToolObject
    sandbox: dict[str, Any] | None = None  # the profile every call of the session runs in


class SessionList(WireModel):
    data: list[Session]


class RunnerItem(WireModel):
    """One NDJSON item of the session runner; `stdout`/`stderr` are decoded to bytes."""

    stdout: bytes
    stderr: bytes
    exit_code: int | None
    signal: int | None
    truncated: bool


class RunnerResult(WireModel):
    """A whole runner call: the execution it was recorded as and its separated streams."""

    execution_id: str
    stdout: bytes
    stderr: bytes
    exit_code: int | None
    # -1 when the deadline fired (docs/streaming.md#the-ndjson-runner).
    signal: int | None


class EnvVerdict(WireModel):
    name: str
    verdict: str
    rule: str | None


class PolicyEvaluation(WireModel):
    """A dry run (`POST /v1/policy/evaluate`): what the policy would decide, and why."""

    verdict: str
    reason: str
    command_verdict: str
    matched_rule: dict[str, Any] | None
    matched_segment: str | None
    segments: list[str]
    critical_hits: list[str]
    unreadable_reasons: list[str]
    parse_error: str | None
    env_verdict: str
    env: list[EnvVerdict]
    cwd: str
    cd_rewrite: dict[str, Any] | None
    interception: dict[str, Any] | None
    # The sandbox profile it would run with ({network, write, hidden}); null under deny.
    sandbox: dict[str, Any] | None = None


class OutputMatch(WireModel):
    """A line of the log holding the searched text: its byte offset (an `offset` to read or
    stream from), its 1-based line number (None past a capped log's evicted middle) and the
    line as text."""

    offset: int
    line: int | None
    text: str


class OutputSearch(WireModel):
    """`GET /v1/executions/{id}/search`: the lines of the whole log holding `query`."""

    query: str
    matches: list[OutputMatch]
    truncated: bool
    skipped: list[int] | None
    total_bytes: int
    complete: bool


class ReplayedApproval(WireModel):
    """One past command approval judged under a draft policy (`POST /v1/policy/replay`)."""

    approval_id: str
    execution_id: str
    command: str
    requested_by: str
    created_at: datetime
    human: str  # approved, denied, expired or pending
    decided_by: str | None
    draft_verdict: str
    draft_reason: str
    draft_rule: dict[str, Any] | None
    draft_remembered_rule: dict[str, Any] | None
    # True: the draft allows what the human approved or denies what they denied; False: the
    # opposite; None: the draft would still ask, or nobody decided.
    agrees: bool | None


class PolicyReplay(WireModel):
    """A draft policy replayed against past approvals, newest first; `skipped` counts the
    approvals in the window that are not a command's (file, sandbox)."""

    data: list[ReplayedApproval]
    skipped: int

    @property
    def disagreements(self) -> list[ReplayedApproval]:
        """The calls the draft would decide against what a human decided."""
        return [item for item in self.data if item.agrees is False]


class Caller(WireModel):
    """Who the token names."""

    name: str
    role: str


class Info(WireModel):
    version: str
    caller: Caller
    node: str  # this replica's node id
    max_jobs: int
    running_jobs: int
    cluster_running_jobs: int | None = None  # every replica's jobs, on a shared database
    limits: dict[str, Any]
    confinement: str
    execution_limits: dict[str, int | None]
    # memory_mb and processes of all commands together (empty from an older server)
    total_limits: dict[str, int | None] = {}

    # --- files (docs/api.md#files) ----------------------------------------------------------------
    sandbox: dict[str, Any] | None = None  # the kernel boundary around every command
    # what a command inherits of the server's environment: inherit, exclude, pass
    environment: dict[str, Any] | None = None
    oidc_issuer: str | None = None  # the JWT issuer accepted beside static tokens, if any


class FileOperation(WireModel):
    """One recorded read, write or stat; a write's record carries the sha256 of what was
    stored. `state` is awaiting_approval when the policy prompted and nobody decided in time."""

    id: str
    owner: str
    op: str  # read, write, stat
    path: str
    resolved_path: str
    size: int | None
    mode: str | None
    sha256: str | None
    verdict: str  # allow, prompt, deny
    reason: str
    state: str
    message: str | None
    approval_id: str | None
    execution_id: str | None = None  # always null: the approval names the operation itself
    created_at: datetime
    finished_at: datetime | None


class FileOperationList(WireModel):
    data: list[FileOperation]


class FileStat(WireModel):
    path: str
    resolved_path: str
    type: str  # file, directory, other
    size: int
    mode: str  # permission bits in octal, e.g. 0644
    mtime: datetime
    symlink: bool
    sha256: str | None


class FileRule(WireModel):
    match: str
    approval: str
    access: str = "any"


class FileCheck(WireModel):
    """A dry run of the policy's `files` rules (`GET /v1/files/check`)."""

    verdict: str
    reason: str
    rule: FileRule | None
    path: str
    resolved_path: str
    judged_path: str


class FileDownload(WireModel):
    """A download saved locally: where, how many bytes, and their sha256."""

    path: str
    size: int
    sha256: str


# --- live feeds -------------------------------------------------------------------------------


class ExecutionEvent(WireModel):
    """One Server-Sent Event of `GET /v1/executions/{id}/events`: `event` is `state` (id 1:
    awaiting_approval, 2: running) or `end` (id 3, the terminal record, and the last event)."""

    id: int
    event: str
    execution: Execution


class ApprovalEvent(WireModel):
    """One frame of the approvals feed (`WS /v1/approvals/stream`): `snapshot` with the
    pending `approvals` (first, and again after each reconnect), then `approval.requested` and
    `approval.decided` with one `approval`."""

    type: str
    approval: Approval | None = None
    approvals: list[Approval] = []
