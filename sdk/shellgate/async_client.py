"""`AsyncClient`, the asyncio SDK (async_client.py), and `Client`, the blocking one
(sync_client.py, generated from async_client.py), method for method the same (httpx +
websockets). Every method is one API call or a loop of them; what each sends and how its
answer is read lives in `calls.py`."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar

import httpx

from shellgate import calls
from shellgate.async_feeds import AsyncFeeds
from shellgate.async_files import AsyncFiles
from shellgate.async_stream import AsyncAttachment, signal_once
from shellgate.calls import DEFAULT_URL, LONG_POLL_SECONDS, OUTPUT_PAGE_BYTES, Call
from shellgate.errors import ServerUnreachableError
from shellgate.frames import Frame
from shellgate.models import (
    Approval,
    ApprovalList,
    Execution,
    ExecutionPage,
    Info,
    OutputChunk,
    OutputSearch,
    PolicyEvaluation,
    PolicyReplay,
    RunnerItem,
    RunnerResult,
    Session,
    SessionList,
)
from shellgate.remember import Remember

T = TypeVar("T")


class AsyncClient(AsyncFiles, AsyncFeeds):
    """A shellgate server: `AsyncClient` for asyncio, `Client` for plain calls. Use it as a
    context manager, or call `close()`.

    >>> with Client("http://127.0.0.1:8000", token="…") as client:
    ...     result = client.run("echo hello")
    ...     print(result.exit_code, result.output)

    >>> async with AsyncClient("http://127.0.0.1:8000", token="…") as client:
    ...     result = await client.run("echo hello")
    """

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        token: str | None = None,
        *,
        reconnects: int = 8,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.reconnects = reconnects
        try:
            self._http = httpx.AsyncClient(
                base_url=self.base_url,
                headers=calls.auth_headers(token),
                timeout=calls.timeout(calls.DEFAULT_READ_SECONDS),
                transport=transport,
            )
        except (httpx.InvalidURL, ValueError) as error:
            raise ServerUnreachableError(f"invalid server URL {base_url!r}: {error}") from None

    @classmethod
    def from_env(cls) -> AsyncClient:
        """`SHELLGATE_URL` (default http://127.0.0.1:8000) and `SHELLGATE_TOKEN`."""
        return cls(os.environ.get("SHELLGATE_URL", DEFAULT_URL), os.environ.get("SHELLGATE_TOKEN"))

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def _request(self, call: Call[Any]) -> httpx.Response:
        try:
            response = await self._http.request(
                call.method,
                call.path,
                json=call.json,
                params=call.params,
                timeout=calls.timeout(call.read_seconds),
            )
        except httpx.TimeoutException as error:
            raise ServerUnreachableError(
                f"no answer from {self.base_url} in time ({type(error).__name__})"
            ) from None
        except (httpx.TransportError, httpx.InvalidURL) as error:
            raise ServerUnreachableError(
                f"cannot reach the server at {self.base_url}: {error or type(error).__name__}"
            ) from None
        if response.status_code >= 400:
            raise calls.error_from(response)
        return response

    async def _call(self, call: Call[T]) -> T:
        return call.parse(await self._request(call))

    # --- executions -------------------------------------------------------------------------

    async def run(
        self,
        command: str,
        *,
        cwd: str | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        session: str | None = None,
        pty: bool = False,
        rows: int | None = None,
        cols: int | None = None,
        approval_wait: float | None = None,
        limits: Mapping[str, int] | None = None,
        tools: list[str] | None = None,
        notify_url: str | None = None,
        idle_timeout: float | None = None,
        idle_action: str | None = None,
        sandbox: Mapping[str, object] | None = None,
        follow: bool = True,
    ) -> Execution:
        """Run a command in the foreground and return its record. With `follow` (the default)
        a call the server answers before the end — auto-backgrounded, or held for an approval —
        is waited for until the record is terminal; `follow=False` returns the first answer.
        A command the policy denies raises `PermissionDeniedError` (`policy_denied`), and so
        does one whose approval is denied while the server holds the call
        (`approval_rejected`); denied later, while this call follows it, the record ends
        `rejected`."""
        execution = await self._call(
            calls.submit(
                command,
                run_async=False,
                cwd=cwd,
                timeout_seconds=timeout,
                env=env,
                session=session,
                pty=pty,
                rows=rows,
                cols=cols,
                approval_wait=approval_wait,
                limits=limits,
                tools=tools,
                notify_url=notify_url,
                idle_timeout=idle_timeout,
                idle_action=idle_action,
                sandbox=sandbox,
            )
        )
        return await self.wait(execution.id) if follow and not execution.is_terminal else execution

    async def start(
        self,
        command: str,
        *,
        cwd: str | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        session: str | None = None,
        pty: bool = False,
        rows: int | None = None,
        cols: int | None = None,
        limits: Mapping[str, int] | None = None,
        tools: list[str] | None = None,
        notify_url: str | None = None,
        idle_timeout: float | None = None,
        idle_action: str | None = None,
        sandbox: Mapping[str, object] | None = None,
    ) -> Execution:
        """Start a background job; answers at once with its record (`state` running, or
        awaiting_approval). Follow it with `wait`, `stream`, `read` or `attach`."""
        return await self._call(
            calls.submit(
                command,
                run_async=True,
                cwd=cwd,
                timeout_seconds=timeout,
                env=env,
                session=session,
                pty=pty,
                rows=rows,
                cols=cols,
                approval_wait=None,
                limits=limits,
                tools=tools,
                notify_url=notify_url,
                idle_timeout=idle_timeout,
                idle_action=idle_action,
                sandbox=sandbox,
            )
        )

    async def get(self, execution_id: str) -> Execution:
        return await self._call(calls.get_execution(execution_id))

    async def wait(self, execution_id: str, timeout: float | None = None) -> Execution:
        """The record once it is terminal, by long polls; after `timeout` seconds (None: no
        limit) the record as it is then."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = LONG_POLL_SECONDS if deadline is None else deadline - time.monotonic()
            hold = max(0.0, min(LONG_POLL_SECONDS, left))
            execution = await self._call(calls.get_execution(execution_id, wait=hold))
            if execution.is_terminal or (deadline is not None and time.monotonic() >= deadline):
                return execution

    async def list_executions(
        self, *, state: list[str] | None = None, limit: int = 50, cursor: str | None = None
    ) -> ExecutionPage:
        """Newest first; pass `next_cursor` back as `cursor` for the next page."""
        return await self._call(calls.list_executions(state, limit, cursor))

    async def read(
        self, execution_id: str, offset: int = 0, limit: int = OUTPUT_PAGE_BYTES
    ) -> OutputChunk:
        """Raw log bytes from `offset` (at most `limit`), with `next_offset` to read on."""
        return await self._call(calls.read_output(execution_id, offset, limit))

    async def search_output(
        self, execution_id: str, query: str, *, ignore_case: bool = False, limit: int | None = None
    ) -> OutputSearch:
        """The lines of the execution's whole log holding `query`, searched on the server (the
        log on disk, not what was read so far), each with its byte offset and line number."""
        return await self._call(calls.search_output(execution_id, query, ignore_case, limit))

    async def output(self, execution_id: str, offset: int = 0) -> bytes:
        """The raw log from `offset` to what is written now (all of it once it ended)."""
        parts: list[bytes] = []
        while True:
            chunk = await self.read(execution_id, offset)
            parts.append(chunk.data)
            if chunk.next_offset <= offset or chunk.next_offset >= chunk.total_bytes:
                return b"".join(parts)
            offset = chunk.next_offset

    async def stream(self, execution_id: str, offset: int = 0) -> AsyncIterator[Frame]:
        """The execution's frames from `offset` until its `ExitFrame`; a dropped socket is
        reopened at the offset after the last byte delivered, so none is lost or repeated."""
        async with self.attach(execution_id, offset=offset) as attachment:
            async for frame in attachment:
                yield frame

    def attach(self, execution_id: str, offset: int = 0) -> AsyncAttachment:
        """A two-way, resuming connection: iterate it for frames; `send`, `resize` and
        `signal` drive a PTY run; `close()` detaches and leaves the run running."""
        return AsyncAttachment(
            self.base_url, self.token, execution_id, offset=offset, reconnects=self.reconnects
        )

    async def cancel(self, execution_id: str) -> Execution:
        """End a running execution (its process group) or withdraw one awaiting approval."""
        return await self._call(calls.cancel(execution_id))

    async def signal(self, execution_id: str, name: str) -> None:
        """Send INT, TERM, KILL, HUP or QUIT to the execution's process group."""
        await signal_once(self.base_url, self.token, execution_id, name)

    async def input(self, execution_id: str, data: str) -> None:
        """Type text into a PTY run (`\\r` is Enter, `\\x03` Ctrl-C)."""
        await self._call(calls.send_input(execution_id, data))

    async def resize(self, execution_id: str, rows: int, cols: int) -> None:
        await self._call(calls.resize(execution_id, rows, cols))

    # --- approvals ----------------------------------------------------------------------------

    async def list_approvals(
        self, *, state: str | None = "pending", limit: int = 100
    ) -> ApprovalList:
        """Approvals in `state` (pending, approved, denied, expired; None: all)."""
        return await self._call(calls.list_approvals(state, limit))

    async def get_approval(self, approval_id: str) -> Approval:
        return await self._call(calls.get_approval(approval_id))

    async def decide(
        self,
        approval_id: str,
        *,
        approve: bool,
        reason: str | None = None,
        remember: Remember | None = None,
    ) -> Approval:
        return await self._call(calls.decide(approval_id, approve, reason, remember))

    async def approve(
        self, approval_id: str, reason: str | None = None, *, remember: Remember | None = None
    ) -> Approval:
        """Approve; with `remember`, calls like this one also run without a prompt for a while
        (a remembered rule; the answer's `remembered_rule` names it)."""
        return await self.decide(approval_id, approve=True, reason=reason, remember=remember)

    async def deny(self, approval_id: str, reason: str | None = None) -> Approval:
        return await self.decide(approval_id, approve=False, reason=reason)

    # --- policy -------------------------------------------------------------------------------

    async def get_policy(self) -> dict[str, Any]:
        return await self._call(calls.get_policy())

    async def put_policy(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """Replace the policy (admin token); `document` has the shape `get_policy` returns."""
        return await self._call(calls.put_policy(document))

    async def evaluate(
        self,
        command: str,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        tools: list[str] | None = None,
    ) -> PolicyEvaluation:
        """Dry run: what the policy would decide for `command` (runs nothing)."""
        return await self._call(calls.evaluate(command, env, cwd, tools))

    async def replay_policy(
        self,
        document: Mapping[str, Any],
        *,
        limit: int | None = None,
        since: datetime | str | None = None,
    ) -> PolicyReplay:
        """What the draft policy `document` would have decided for the past command approvals
        (newest first, at most `limit`, created at or after `since`) beside what the humans
        decided; approver or admin token. A pure read: nothing changes."""
        return await self._call(calls.replay_policy(document, limit, since))

    # --- sessions -----------------------------------------------------------------------------

    async def create_session(
        self,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_ms: int | None = None,
        pty: bool | None = None,
        limits: Mapping[str, int] | None = None,
        keep_cwd: bool | None = None,
    ) -> Session:
        """`keep_cwd`: each call starts in the directory the last one ended in."""
        fields = {
            "cwd": cwd,
            "env": env,
            "timeout_ms": timeout_ms,
            "pty": pty,
            "limits": limits,
            "keep_cwd": keep_cwd,
        }
        return await self._call(calls.create_session(fields))

    async def get_session(self, session_id: str) -> Session:
        return await self._call(calls.get_session(session_id))

    async def list_sessions(self) -> SessionList:
        return await self._call(calls.list_sessions())

    async def update_session(
        self,
        session_id: str,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_ms: int | None = None,
        pty: bool | None = None,
        keep_cwd: bool | None = None,
    ) -> Session:
        """Change the fields given (`env` replaces the whole environment)."""
        fields = {
            "cwd": cwd,
            "env": env,
            "timeout_ms": timeout_ms,
            "pty": pty,
            "keep_cwd": keep_cwd,
        }
        return await self._call(calls.update_session(session_id, fields))

    async def delete_session(self, session_id: str) -> None:
        await self._call(calls.delete_session(session_id))

    async def session_items(
        self, session_id: str, command: str, *, timeout_ms: int | None = None
    ) -> AsyncIterator[tuple[str, RunnerItem]]:
        """The session runner's items as they come, each with the execution's id. Leaving
        the loop early closes the call, which cancels the command."""
        call = calls.session_run(session_id, command, timeout_ms)
        try:
            async with self._http.stream(
                call.method, call.path, json=call.json, timeout=calls.timeout(None)
            ) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise calls.error_from(response)
                execution_id = response.headers.get("X-Execution-Id", "")
                async for line in response.aiter_lines():
                    if line.strip():
                        yield execution_id, calls.runner_item(line)
        except httpx.TransportError as error:
            raise ServerUnreachableError(
                f"the runner call broke off: {error or type(error).__name__}"
            ) from None

    async def session_run(
        self, session_id: str, command: str, *, timeout_ms: int | None = None
    ) -> RunnerResult:
        """Run `command` in the session with its saved shell state (the NDJSON runner);
        stdout and stderr come back apart."""
        items = [
            item async for item in self.session_items(session_id, command, timeout_ms=timeout_ms)
        ]
        return calls.collect_runner(items)

    # --- service ------------------------------------------------------------------------------

    async def info(self) -> Info:
        return await self._call(calls.info())
