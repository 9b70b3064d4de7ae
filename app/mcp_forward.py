"""MCP session calls run on the replica the session's shell lives on.

REST requests are carried to their owner by the forwarding middleware (app/cluster/
forwarding.py), which routes by path and body. An MCP call is one `/mcp` request to whichever
replica the gateway picked, so the session tools ask the owner themselves: the same REST call,
with the caller's own bearer token, marked as a forward. Run locally, a call would have found
none of the session's state (it is in the owner's data dir) and saved its own beside it.
"""

from __future__ import annotations

import json
from typing import Any

from mcp_types import CallToolResult

from app.cluster.forwarding import Forwarder, NodeUnreachableError, Target
from app.errors import AppError
from app.executions.views import OutputPage
from app.schemas import ExecutionPublic


class OwnerRefused(AppError):
    code = "owner_refused"


def _refusal(target: Target, status: int, answer: Any) -> OwnerRefused:
    envelope = answer.get("error") if isinstance(answer, dict) else None
    message = envelope.get("message") if isinstance(envelope, dict) else None
    return OwnerRefused(message or f"replica {target.node_id} answered {status}: {answer}")


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
        raise _refusal(target, status, answer)
    return status, answer


async def output_from_owner(
    forwarder: Forwarder,
    target: Target,
    *,
    authorization: str,
    execution_id: str,
    offset: int,
    limit: int,
) -> OutputPage:
    """A page of the log the owner has (`GET /v1/executions/{id}/output`)."""
    path = f"/v1/executions/{execution_id}/output?offset={offset}&limit={limit}"
    try:
        status, headers, content = await forwarder.call_raw(
            target, "GET", path, authorization=authorization
        )
    except NodeUnreachableError as error:
        raise OwnerRefused(error.message) from None
    if status >= 400:
        try:
            answer: Any = json.loads(content)
        except ValueError:
            answer = content[:200]
        raise _refusal(target, status, answer)
    return OutputPage(
        data=content,
        total_bytes=int(headers["x-total-bytes"]),
        complete=headers["x-complete"] == "true",
        next_offset=int(headers["x-next-offset"]),
    )


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
