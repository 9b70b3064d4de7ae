"""MCP session calls run on the replica the session's shell lives on.

REST requests are carried to their owner by the forwarding middleware (app/cluster/
forwarding.py), which routes by path and body. An MCP call is one `/mcp` request to whichever
replica the gateway picked, so the session tools ask the owner themselves: the same REST call,
with the caller's own bearer token, marked as a forward. Run locally, a call would have found
none of the session's state (it is in the owner's data dir) and saved its own beside it.
"""

from __future__ import annotations

from typing import Any

from mcp_types import CallToolResult

from app.cluster.forwarding import Forwarder, NodeUnreachableError, Target
from app.errors import AppError
from app.schemas import ExecutionPublic


class OwnerRefused(AppError):
    code = "owner_refused"


async def call_on_owner(
    forwarder: Forwarder,
    target: Target,
    *,
    authorization: str,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
) -> tuple[int, Any]:
    """The owner's status and JSON answer; AppError with its message when it refused."""
    try:
        status, answer = await forwarder.call(
            target, method, path, authorization=authorization, body=body
        )
    except NodeUnreachableError as error:
        raise OwnerRefused(error.message) from None
    if status >= 400:
        envelope = answer.get("error") if isinstance(answer, dict) else None
        message = envelope.get("message") if isinstance(envelope, dict) else None
        raise OwnerRefused(message or f"replica {target.node_id} answered {status}: {answer}")
    return status, answer


async def record_from_owner(
    forwarder: Forwarder, target: Target, *, authorization: str, method: str, path: str
) -> ExecutionPublic:
    """An execution's record as its owner answers `method path` (a wait, a cancel)."""
    _, answer = await call_on_owner(
        forwarder, target, authorization=authorization, method=method, path=path
    )
    return ExecutionPublic.model_validate(answer)


async def run_on_owner(
    forwarder: Forwarder,
    target: Target,
    *,
    authorization: str,
    body: dict[str, Any],
    execution_result: Any,
) -> CallToolResult:
    """`POST /v1/executions` on the owner; its record as the tool's result."""
    _, answer = await call_on_owner(
        forwarder,
        target,
        authorization=authorization,
        method="POST",
        path="/v1/executions",
        body=body,
    )
    result: CallToolResult = execution_result(ExecutionPublic.model_validate(answer))
    return result
