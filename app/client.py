"""A small synchronous client for shellgate's REST API (what `shellgate run|jobs|…` use).

Every server error becomes a `ClientError` carrying the error envelope's code and message and
the HTTP status; a server that cannot be reached becomes `ServerUnreachableError`. Callers never
see an httpx exception.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

import httpx
from pydantic import ValidationError
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI
from websockets.sync.client import connect

from app.policy import PolicyDocument
from app.schemas import ApprovalPublic, ApprovalsPublic, ExecutionPublic, ExecutionsPublic

DEFAULT_URL = "http://127.0.0.1:8000"
CONNECT_SECONDS = 5.0
DEFAULT_READ_SECONDS = 30.0
# Room over a server-side wait (a long-poll, a foreground run) for the answer to travel back.
ANSWER_MARGIN_SECONDS = 30.0
SERVER_DEFAULT_TIMEOUT = 300.0
SERVER_DEFAULT_APPROVAL_WAIT = 30.0

WireModel = TypeVar("WireModel", ExecutionPublic, ExecutionsPublic, ApprovalPublic, ApprovalsPublic)


@dataclass
class ClientError(Exception):
    """The server answered with an error status."""

    status: int
    code: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.message


class ServerUnreachableError(Exception):
    """No HTTP answer: refused connection, unknown host, timeout, broken connection."""


@dataclass(frozen=True)
class OutputPage:
    data: bytes
    next_offset: int
    total_bytes: int
    complete: bool


def _error_from(response: httpx.Response) -> ClientError:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        envelope = body.get("error")
        if isinstance(envelope, dict) and isinstance(envelope.get("message"), str):
            details = envelope.get("details")
            return ClientError(
                status=response.status_code,
                code=str(envelope.get("code", "error")),
                message=envelope["message"],
                details=details if isinstance(details, dict) else {},
            )
        # Request-shape validation keeps FastAPI's `{"detail": [...]}` shape.
        detail = body.get("detail")
        if isinstance(detail, list):
            problems = "; ".join(
                f"{'.'.join(str(part) for part in item.get('loc', []))}: {item.get('msg', '')}"
                for item in detail
                if isinstance(item, dict)
            )
            return ClientError(response.status_code, "validation_error", problems or "invalid")
        if isinstance(detail, str):
            return ClientError(response.status_code, "error", detail)
    return ClientError(
        response.status_code, "http_error", f"HTTP {response.status_code} {response.reason_phrase}"
    )


class ShellgateClient:
    def __init__(self, base_url: str = DEFAULT_URL, token: str | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base_url = base_url.rstrip("/")
        self._token = token
        try:
            self._http = httpx.Client(
                base_url=self.base_url,
                headers=headers,
                timeout=httpx.Timeout(DEFAULT_READ_SECONDS, connect=CONNECT_SECONDS),
            )
        except (httpx.InvalidURL, ValueError) as error:
            raise ServerUnreachableError(f"invalid server URL {base_url!r}: {error}") from None

    def __enter__(self) -> ShellgateClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(
        self,
        method: str,
        path: str,
        *,
        json: object = None,
        params: Mapping[str, str | int | float | list[str]] | None = None,
        read_seconds: float | None = DEFAULT_READ_SECONDS,
    ) -> httpx.Response:
        timeout = httpx.Timeout(read_seconds, connect=CONNECT_SECONDS)
        try:
            response = self._http.request(method, path, json=json, params=params, timeout=timeout)
        except httpx.TimeoutException as error:
            raise ServerUnreachableError(
                f"no answer from {self.base_url} in time ({type(error).__name__})"
            ) from None
        except (httpx.TransportError, httpx.InvalidURL) as error:
            raise ServerUnreachableError(
                f"cannot reach the server at {self.base_url}: {error or type(error).__name__}"
            ) from None
        if response.status_code >= 400:
            raise _error_from(response)
        return response

    @contextlib.contextmanager
    def stream(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int | float] | None = None,
        content: Iterator[bytes] | None = None,
        headers: Mapping[str, str] | None = None,
        read_seconds: float | None = DEFAULT_READ_SECONDS,
    ) -> Iterator[httpx.Response]:
        """A request whose body (`content`) and answer are streamed (file transfers): the
        caller reads the response; an error status raises ClientError as every call does."""
        timeout = httpx.Timeout(read_seconds, connect=CONNECT_SECONDS)
        try:
            with self._http.stream(
                method, path, params=params, content=content, headers=headers, timeout=timeout
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    raise _error_from(response)
                yield response
        except httpx.TimeoutException as error:
            raise ServerUnreachableError(
                f"no answer from {self.base_url} in time ({type(error).__name__})"
            ) from None
        except (httpx.TransportError, httpx.InvalidURL) as error:
            raise ServerUnreachableError(
                f"cannot reach the server at {self.base_url}: {error or type(error).__name__}"
            ) from None

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._request(method, path, **kwargs)
        try:
            return response.json()
        except ValueError:
            raise ClientError(
                response.status_code, "bad_response", f"{path} did not answer JSON"
            ) from None

    def _model(self, model: type[WireModel], method: str, path: str, **kwargs: Any) -> WireModel:
        body = self._json(method, path, **kwargs)
        try:
            return model.model_validate(body)
        except ValidationError as error:
            raise ClientError(
                200, "bad_response", f"unexpected answer from {path}: {error.error_count()} errors"
            ) from None

    # Executions

    def run(
        self,
        command: str,
        *,
        cwd: str | None = None,
        timeout: float | None = None,
        run_async: bool = False,
        env: Mapping[str, str] | None = None,
        session: str | None = None,
        pty: bool = False,
        approval_wait: float | None = None,
    ) -> ExecutionPublic:
        body: dict[str, object] = {"command": command, "async": run_async}
        if cwd is not None:
            body["cwd"] = cwd
        if timeout is not None:
            body["timeout"] = timeout
        if env:
            body["env"] = dict(env)
        if session is not None:
            body["session"] = session
        if pty:
            body["pty"] = True
        if approval_wait is not None:
            body["approval_wait"] = approval_wait
        deadline = SERVER_DEFAULT_TIMEOUT if timeout is None else timeout
        waits_for_approval = (
            SERVER_DEFAULT_APPROVAL_WAIT if approval_wait is None else approval_wait
        )
        # timeout 0 disables the server's deadline, so the answer may take as long as the command.
        read_seconds = (
            None if deadline == 0 else deadline + waits_for_approval + ANSWER_MARGIN_SECONDS
        )
        return self._model(
            ExecutionPublic, "POST", "/v1/executions", json=body, read_seconds=read_seconds
        )

    def list_executions(
        self, *, states: list[str] | None = None, limit: int = 50, cursor: str | None = None
    ) -> ExecutionsPublic:
        params: dict[str, str | int | float | list[str]] = {"limit": limit}
        if states:
            params["state"] = states
        if cursor:
            params["cursor"] = cursor
        return self._model(ExecutionsPublic, "GET", "/v1/executions", params=params)

    def get_execution(self, execution_id: str, *, wait: float = 0) -> ExecutionPublic:
        return self._model(
            ExecutionPublic,
            "GET",
            f"/v1/executions/{execution_id}",
            params={"wait": wait},
            read_seconds=wait + ANSWER_MARGIN_SECONDS,
        )

    def cancel(self, execution_id: str) -> ExecutionPublic:
        return self._model(ExecutionPublic, "POST", f"/v1/executions/{execution_id}/cancel")

    def read_output(
        self, execution_id: str, *, offset: int = 0, limit: int = 1024 * 1024
    ) -> OutputPage:
        response = self._request(
            "GET",
            f"/v1/executions/{execution_id}/output",
            params={"offset": offset, "limit": limit},
        )
        try:
            return OutputPage(
                data=response.content,
                next_offset=int(response.headers["X-Next-Offset"]),
                total_bytes=int(response.headers["X-Total-Bytes"]),
                complete=response.headers["X-Complete"] == "true",
            )
        except (KeyError, ValueError):
            raise ClientError(
                response.status_code, "bad_response", "output answer lacks its offset headers"
            ) from None

    def follow_output(self, execution_id: str, *, offset: int = 0) -> Iterator[bytes]:
        """The raw log from `offset` as the execution writes it, until it ends: the live stream
        (`WS /v1/executions/{id}/stream`), so new bytes arrive as they are written."""
        url = "ws" + self.base_url.removeprefix("http") + f"/v1/executions/{execution_id}/stream"
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        try:
            with connect(
                f"{url}?offset={offset}",
                additional_headers=headers,
                open_timeout=CONNECT_SECONDS,
                max_size=None,
            ) as socket:
                for message in socket:
                    frame = json.loads(message)
                    if frame["type"] == "output":
                        data = frame["data"]
                        yield (
                            base64.b64decode(data)
                            if frame.get("encoding") == "base64"
                            else data.encode("utf-8")
                        )
                    elif frame["type"] == "exit":
                        return
        except ConnectionClosed as closed:
            # The server refuses with close code 4000 + the HTTP status, the message as reason.
            code = closed.rcvd.code if closed.rcvd is not None else 0
            reason = closed.rcvd.reason if closed.rcvd is not None else ""
            if 4400 <= code < 4600:
                raise ClientError(code - 4000, "stream_refused", reason) from None
            raise ServerUnreachableError(f"the stream of {execution_id} broke off") from None
        except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as error:
            raise ServerUnreachableError(
                f"cannot stream from {self.base_url}: {error or type(error).__name__}"
            ) from None

    # Approvals

    def list_approvals(self, *, state: str | None = None, limit: int = 100) -> ApprovalsPublic:
        params: dict[str, str | int | float | list[str]] = {"limit": limit}
        if state:
            params["state"] = state
        return self._model(ApprovalsPublic, "GET", "/v1/approvals", params=params)

    def decide(self, approval_id: str, *, approve: bool, reason: str | None) -> ApprovalPublic:
        action = "approve" if approve else "deny"
        return self._model(
            ApprovalPublic,
            "POST",
            f"/v1/approvals/{approval_id}/{action}",
            json={"reason": reason},
        )

    # Policy

    def get_policy(self) -> dict[str, Any]:
        body: dict[str, Any] = self._json("GET", "/v1/policy")
        return body

    def put_policy(self, document: PolicyDocument) -> dict[str, Any]:
        body: dict[str, Any] = self._json(
            "PUT", "/v1/policy", json=document.model_dump(mode="json")
        )
        return body

    def evaluate(
        self, command: str, *, env: dict[str, str] | None = None, cwd: str | None = None
    ) -> dict[str, Any]:
        """The dry run: `verdict`, `reason`, `matched_rule`, `segments`, `env`, … (runs
        nothing)."""
        request: dict[str, Any] = {"command": command}
        if env:
            request["env"] = env
        if cwd is not None:
            request["cwd"] = cwd
        body: dict[str, Any] = self._json("POST", "/v1/policy/evaluate", json=request)
        return body
