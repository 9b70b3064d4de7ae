"""MCP calls on a session or an execution that lives on another replica, made there.

REST requests are carried to their owner by the forwarding middleware (app/cluster/
forwarding.py), which routes by path and body. An MCP call is one `/mcp` request to whichever
replica the gateway picked, so the tools ask the owner themselves: the same REST call, with the
caller's own bearer token, marked as a forward. Run locally, a session call would have found
none of the session's state (it is in the owner's data dir), a cancel no process to stop, a
log read no log.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from app.cluster.forwarding import Forwarder, NodeUnreachableError, Target
from app.errors import AppError
from app.executions.views import OutputPage
from app.schemas import ExecutionPublic


class OwnerRefused(AppError):
    code = "owner_refused"


async def ask_owner(
    forwarder: Forwarder,
    target: Target,
    *,
    authorization: str,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
) -> tuple[dict[str, str], bytes]:
    """The owner's answer (headers, body); OwnerRefused, with its message, when it refused or
    did not answer."""
    try:
        status, headers, content = await forwarder.call(
            target, method, path, authorization=authorization, body=body
        )
    except NodeUnreachableError as error:
        raise OwnerRefused(error.message) from None
    if status >= 400:
        try:
            answer: Any = json.loads(content)
        except ValueError:
            answer = content[:200]
        envelope = answer.get("error") if isinstance(answer, dict) else None
        message = envelope.get("message") if isinstance(envelope, dict) else None
        raise OwnerRefused(message or f"replica {target.node_id} answered {status}: {answer}")
    return headers, content


async def record_from_owner(
    forwarder: Forwarder,
    target: Target,
    *,
    authorization: str,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
) -> ExecutionPublic:
    """An execution's record as its owner answers `method path` (a run, a wait, a cancel)."""
    _, content = await ask_owner(
        forwarder, target, authorization=authorization, method=method, path=path, body=body
    )
    try:
        return ExecutionPublic.model_validate_json(content)
    except ValidationError:
        raise OwnerRefused(f"replica {target.node_id} answered no execution record") from None


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
    headers, content = await ask_owner(
        forwarder, target, authorization=authorization, method="GET", path=path
    )
    try:
        return OutputPage(
            data=content,
            total_bytes=int(headers["x-total-bytes"]),
            complete=headers["x-complete"] == "true",
            next_offset=int(headers["x-next-offset"]),
        )
    except (KeyError, ValueError):
        raise OwnerRefused(f"replica {target.node_id} answered no log page") from None
