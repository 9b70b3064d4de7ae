"""Wire models: what clients send and receive, one module per idea. Persistence models live in
`models.py`."""

from __future__ import annotations

from app.schemas.approvals import (
    ApprovalDecision,
    ApprovalPublic,
    ApprovalsPublic,
    RememberChoice,
)
from app.schemas.common import (
    StrictModel,
)
from app.schemas.errors import (
    ErrorBody,
    ErrorResponse,
    RequestValidationErrorResponse,
    UnprocessableResponse,
    ValidationIssue,
)
from app.schemas.executions import (
    EXECUTION_EXAMPLE,
    ApprovalSummary,
    ExecutionCreate,
    ExecutionInput,
    ExecutionLimits,
    ExecutionPublic,
    ExecutionResize,
    ExecutionsPublic,
    NotificationAttempt,
)
from app.schemas.policy import (
    CdRewrite,
    EnvVerdictPublic,
    InterceptionPublic,
    PolicyEvaluate,
    PolicyEvaluation,
    PolicyReplay,
    PolicyVersionPublic,
    PolicyVersionsPublic,
    ReplayedApproval,
)
from app.schemas.sandbox import (
    SandboxProfilePublic,
    SandboxRequest,
    SandboxRequestPublic,
)
from app.schemas.service import (
    Caller,
    Health,
    Info,
    NodePublic,
    NodesPublic,
    Readiness,
    ToolObject,
)
from app.schemas.sessions import (
    SESSION_DEFAULT_TIMEOUT_MS,
    SESSION_MAX_TIMEOUT_MS,
    RunItem,
    RunRequest,
    SessionCreate,
    SessionPatch,
    SessionPending,
    SessionPublic,
    SessionsPublic,
)
from app.schemas.streaming import (
    WsClientFrame,
    WsInputFrame,
    WsPingFrame,
    WsResizeFrame,
    WsSignalFrame,
    WsTicket,
)

__all__ = [
    "EXECUTION_EXAMPLE",
    "SESSION_DEFAULT_TIMEOUT_MS",
    "SESSION_MAX_TIMEOUT_MS",
    "ApprovalDecision",
    "ApprovalPublic",
    "ApprovalSummary",
    "ApprovalsPublic",
    "Caller",
    "CdRewrite",
    "EnvVerdictPublic",
    "ErrorBody",
    "ErrorResponse",
    "ExecutionCreate",
    "ExecutionInput",
    "ExecutionLimits",
    "ExecutionPublic",
    "ExecutionResize",
    "ExecutionsPublic",
    "Health",
    "Info",
    "InterceptionPublic",
    "NodePublic",
    "NodesPublic",
    "NotificationAttempt",
    "PolicyEvaluate",
    "PolicyEvaluation",
    "PolicyReplay",
    "PolicyVersionPublic",
    "PolicyVersionsPublic",
    "Readiness",
    "RememberChoice",
    "ReplayedApproval",
    "RequestValidationErrorResponse",
    "RunItem",
    "RunRequest",
    "SandboxProfilePublic",
    "SandboxRequest",
    "SandboxRequestPublic",
    "SessionCreate",
    "SessionPatch",
    "SessionPending",
    "SessionPublic",
    "SessionsPublic",
    "StrictModel",
    "ToolObject",
    "UnprocessableResponse",
    "ValidationIssue",
    "WsClientFrame",
    "WsInputFrame",
    "WsPingFrame",
    "WsResizeFrame",
    "WsSignalFrame",
    "WsTicket",
]
