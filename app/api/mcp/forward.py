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
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from app.cluster.forwarding import Forwarder, NodeUnreachableError, Target
from app.core.errors import AppError
from app.executions.views import OutputPage
from app.schemas import ExecutionPublic


class OwnerRefused(AppError):
    code = "owner_refused"


@dataclass(frozen=True)
class Owner:
    """The replica a session or an execution lives on, called as this MCP caller."""

    forwarder: Forwarder
    target: Target
    authorization: str  # the caller's own header: the owner checks the token itself
    # Asked again once its record ended (`_ask_unless_stopping`): a silence now is the error,
    # as REST's last try is 503 `node_unreachable`.
    last_try: bool = False

    async def ask(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[dict[str, str], bytes]:
        """The owner's answer (headers, body); OwnerRefused, with its message, when it refused
        or did not answer."""
        try:
            answer = await self._call(method, path, body)
        except NodeUnreachableError as error:
            raise OwnerRefused(error.message) from None
        return self._accepted(*answer)

    async def _call(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        return await self.forwarder.call(
            self.target, method, path, authorization=self.authorization, body=body
        )

    async def _ask_unless_stopping(
        self, execution_id: str, method: str, path: str
    ) -> tuple[dict[str, str], bytes] | None:
        """As `ask`, about one of the owner's executions; None when the owner did not answer
        and is stopping: its stop ends or records every execution it runs, so once the record
        has ended (Forwarder.until_recorded, up to the shutdown grace) the call is to be made
        where a finished execution's is, as REST's is (ForwardToOwner.answer_without_owner)."""
        try:
            answer = await self._call(method, path)
        except NodeUnreachableError as error:
            if self.last_try or not await self.forwarder.is_stopping(self.target.node_id):
                raise OwnerRefused(error.message) from None
            await self.forwarder.until_recorded(execution_id)
            return None
        return self._accepted(*answer)

    def _accepted(
        self, status: int, headers: dict[str, str], content: bytes
    ) -> tuple[dict[str, str], bytes]:
        """An answer below 400 as it came; OwnerRefused, with the owner's message, otherwise."""
        if status >= 400:
            try:
                answer: Any = json.loads(content)
            except ValueError:
                answer = content[:200]
            envelope = answer.get("error") if isinstance(answer, dict) else None
            message = envelope.get("message") if isinstance(envelope, dict) else None
            raise OwnerRefused(
                message or f"replica {self.target.node_id} answered {status}: {answer}"
            )
        return headers, content

    async def record(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> ExecutionPublic:
        """An execution's record as the owner answers `method path` (a run)."""
        _, content = await self.ask(method, path, body)
        return self._record(content)

    async def wait(self, execution_id: str, seconds: float) -> ExecutionPublic | None:
        """The record once the owner's long-poll (`?wait=seconds`) ends; None when the wait is
        to be served here from the record in the database, as a REST long-poll is (Forwarder.
        forward_http): the owner did not answer (stopping, or gone: the cluster records what
        became of its executions), or its stop began while it held the wait (a stop ends every
        wait at once, with the record as it stood)."""
        try:
            answer = await self._call("GET", f"/v1/executions/{execution_id}?wait={seconds:g}")
        except NodeUnreachableError:
            return None
        if await self.forwarder.is_stopping(self.target.node_id):
            return None
        _, content = self._accepted(*answer)
        return self._record(content)

    async def cancel(self, execution_id: str) -> ExecutionPublic | None:
        """The record once the owner cancelled the execution; None when the cancel is to be
        made where a finished execution's is (`_ask_unless_stopping`)."""
        path = f"/v1/executions/{execution_id}/cancel"
        answer = await self._ask_unless_stopping(execution_id, "POST", path)
        return None if answer is None else self._record(answer[1])

    def _record(self, content: bytes) -> ExecutionPublic:
        try:
            return ExecutionPublic.model_validate_json(content)
        except ValidationError:
            raise OwnerRefused(
                f"replica {self.target.node_id} answered no execution record"
            ) from None

    async def output(self, execution_id: str, offset: int, limit: int) -> OutputPage | None:
        """A page of the log the owner has (`GET /v1/executions/{id}/output`); None when it is
        to be read where a finished execution's log is (`_ask_unless_stopping`)."""
        path = f"/v1/executions/{execution_id}/output?offset={offset}&limit={limit}"
        answer = await self._ask_unless_stopping(execution_id, "GET", path)
        if answer is None:
            return None
        headers, content = answer
        try:
            return OutputPage(
                data=content,
                total_bytes=int(headers["x-total-bytes"]),
                complete=headers["x-complete"] == "true",
                next_offset=int(headers["x-next-offset"]),
            )
        except (KeyError, ValueError):
            raise OwnerRefused(f"replica {self.target.node_id} answered no log page") from None
