"""shellgate's Python SDK: a sync `Client` and an asyncio `AsyncClient` for the REST and
WebSocket API, with typed results, streams that resume by offset, PTY attachment, sessions,
approvals and their live feed, files (streamed, resumed, sha256-checked), execution events
(Server-Sent Events), policy dry runs and webhook signature checks. docs/sdk.md shows it in use.

It is its own distribution, `shellgate-client` (sdk/pyproject.toml): it imports httpx,
httpx-sse, websockets and pydantic only, never the server's own modules (FastAPI, SQLAlchemy,
the policy engine): `sdk/shellgate/ruff.toml` bans them, tests/test_architecture.py checks it
and tests/sdk/test_client_alone.py installs it alone into a fresh venv.
"""

from __future__ import annotations

from shellgate.async_client import AsyncClient
from shellgate.async_stream import AsyncAttachment
from shellgate.calls import ANSWER_MARGIN_SECONDS, DEFAULT_URL
from shellgate.errors import (
    ApiError,
    ApprovalPendingError,
    AuthenticationError,
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitedError,
    ServerError,
    ServerUnreachableError,
    ShellgateError,
    TransferError,
)
from shellgate.frames import ErrorFrame, ExitFrame, Frame, GapFrame, OutputFrame, StateFrame
from shellgate.models import (
    TERMINAL_STATES,
    Approval,
    ApprovalEvent,
    ApprovalList,
    Caller,
    Execution,
    ExecutionEvent,
    ExecutionPage,
    FileCheck,
    FileDownload,
    FileOperation,
    FileOperationList,
    FileStat,
    Info,
    OutputChunk,
    OutputMatch,
    OutputSearch,
    PolicyEvaluation,
    PolicyReplay,
    ReplayedApproval,
    RunnerItem,
    RunnerResult,
    Session,
    SessionList,
)
from shellgate.remember import Remember
from shellgate.sync_client import Client
from shellgate.sync_stream import Attachment
from shellgate.webhooks import SIGNATURE_HEADER, SignatureError, verify_signature

__all__ = [
    "ANSWER_MARGIN_SECONDS",
    "DEFAULT_URL",
    "SIGNATURE_HEADER",
    "TERMINAL_STATES",
    "ApiError",
    "Approval",
    "ApprovalEvent",
    "ApprovalList",
    "ApprovalPendingError",
    "AsyncAttachment",
    "AsyncClient",
    "Attachment",
    "AuthenticationError",
    "Caller",
    "Client",
    "ConflictError",
    "ErrorFrame",
    "Execution",
    "ExecutionEvent",
    "ExecutionPage",
    "ExitFrame",
    "FileCheck",
    "FileDownload",
    "FileOperation",
    "FileOperationList",
    "FileStat",
    "Frame",
    "GapFrame",
    "Info",
    "InvalidRequestError",
    "NotFoundError",
    "OutputChunk",
    "OutputFrame",
    "OutputMatch",
    "OutputSearch",
    "PermissionDeniedError",
    "PolicyEvaluation",
    "PolicyReplay",
    "RateLimitedError",
    "Remember",
    "ReplayedApproval",
    "RunnerItem",
    "RunnerResult",
    "ServerError",
    "ServerUnreachableError",
    "Session",
    "SessionList",
    "ShellgateError",
    "SignatureError",
    "StateFrame",
    "TransferError",
    "verify_signature",
]
