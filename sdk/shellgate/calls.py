"""What each SDK method sends and how its answer is read, shared by the sync and the async
client (no I/O here): a `Call` names the route, the body, the read timeout and the parser."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from shellgate.errors import ApiError, api_error
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
from shellgate.paths import segment
from shellgate.remember import Remember

DEFAULT_URL = "http://127.0.0.1:8000"
CONNECT_SECONDS = 5.0
DEFAULT_READ_SECONDS = 30.0
# Room over a server-side wait (a long poll, a foreground run) for the answer to travel back.
ANSWER_MARGIN_SECONDS = 30.0
SERVER_DEFAULT_TIMEOUT = 300.0
SERVER_DEFAULT_APPROVAL_WAIT = 30.0
# One long poll of `wait()`; the server allows up to 600 s, a shorter hold survives proxies.
LONG_POLL_SECONDS = 60.0
OUTPUT_PAGE_BYTES = 1024 * 1024

T = TypeVar("T")
Params = Mapping[str, str | int | float | list[str]]


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    json: object = None
    params: Params | None = None
    read_seconds: float | None = DEFAULT_READ_SECONDS
    headers: dict[str, str] = field(default_factory=dict)


def timeout(read_seconds: float | None) -> httpx.Timeout:
    return httpx.Timeout(read_seconds, connect=CONNECT_SECONDS)


def auth_headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return float(response.headers["Retry-After"])
    except (KeyError, ValueError):
        return None


def error_from(response: httpx.Response) -> ApiError:
    """The exception for an error answer: the envelope's fields, or FastAPI's 422 shape."""
    status = response.status_code
    retry_after = _retry_after(response)
    request_id = response.headers.get("X-Request-ID")
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        envelope = body.get("error")
        if isinstance(envelope, dict) and isinstance(envelope.get("message"), str):
            details = envelope.get("details")
            return api_error(
                status,
                str(envelope.get("code", "error")),
                envelope["message"],
                details=details if isinstance(details, dict) else {},
                request_id=envelope.get("request_id") or request_id,
                retry_after=retry_after,
            )
        detail = body.get("detail")
        if isinstance(detail, list):
            # Schema validation keeps FastAPI's `{"detail": [...]}` shape.
            problems = "; ".join(
                f"{'.'.join(str(part) for part in item.get('loc', []))}: {item.get('msg', '')}"
                for item in detail
                if isinstance(item, dict)
            )
            return api_error(
                status,
                "validation_error",
                problems or "invalid",
                details={"detail": detail},
                request_id=request_id,
            )
    message = f"HTTP {status} {response.reason_phrase}"
    return api_error(status, "http_error", message, request_id=request_id, retry_after=retry_after)


def _bad_response(response: httpx.Response, what: str) -> ApiError:
    return api_error(response.status_code, "bad_response", f"{response.url.path}: {what}")


def model(kind: type[BaseModel]) -> Callable[[httpx.Response], Any]:
    def parse(response: httpx.Response) -> Any:
        try:
            return kind.model_validate_json(response.content)
        except ValidationError as error:
            problem = f"unexpected answer ({error.error_count()} errors)"
            raise _bad_response(response, problem) from None

    return parse


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        raise _bad_response(response, "did not answer JSON") from None
    if not isinstance(body, dict):
        raise _bad_response(response, "did not answer a JSON object")
    return body


def _nothing(response: httpx.Response) -> None:
    return None


def _output(response: httpx.Response) -> OutputChunk:
    try:
        return OutputChunk(
            data=response.content,
            offset=int(response.headers["X-Offset"]),
            next_offset=int(response.headers["X-Next-Offset"]),
            total_bytes=int(response.headers["X-Total-Bytes"]),
            complete=response.headers["X-Complete"] == "true",
        )
    except (KeyError, ValueError):
        raise _bad_response(response, "output answer lacks its offset headers") from None


# --- executions ---------------------------------------------------------------------------------


def submit(
    command: str,
    *,
    run_async: bool,
    cwd: str | None,
    timeout_seconds: float | None,
    env: Mapping[str, str] | None,
    session: str | None,
    pty: bool,
    rows: int | None,
    cols: int | None,
    approval_wait: float | None,
    limits: Mapping[str, int] | None,
    tools: list[str] | None,
    notify_url: str | None = None,
    idle_timeout: float | None = None,
    idle_action: str | None = None,
    sandbox: Mapping[str, object] | None = None,
) -> Call[Execution]:
    body: dict[str, object] = {"command": command}
    optional: dict[str, object] = {
        "cwd": cwd,
        "timeout": timeout_seconds,
        "env": dict(env) if env else None,
        "session": session,
        "rows": rows,
        "cols": cols,
        "approval_wait": approval_wait,
        "limits": dict(limits) if limits else None,
        "tools": tools,
        "notify_url": notify_url,
        "idle_timeout": idle_timeout,
        "idle_action": idle_action,
        "sandbox": dict(sandbox) if sandbox else None,
    }
    body.update({key: value for key, value in optional.items() if value is not None})
    if run_async:
        body["async"] = True
    if pty:
        body["pty"] = True
    read_seconds: float | None = DEFAULT_READ_SECONDS
    if not run_async:
        deadline = SERVER_DEFAULT_TIMEOUT if timeout_seconds is None else timeout_seconds
        held = SERVER_DEFAULT_APPROVAL_WAIT if approval_wait is None else approval_wait
        # timeout 0 disables the server's deadline: the answer may take as long as the command.
        read_seconds = None if deadline == 0 else deadline + held + ANSWER_MARGIN_SECONDS
    return Call("POST", "/v1/executions", model(Execution), json=body, read_seconds=read_seconds)


def get_execution(execution_id: str, wait: float = 0) -> Call[Execution]:
    return Call(
        "GET",
        f"/v1/executions/{segment(execution_id)}",
        model(Execution),
        params={"wait": wait} if wait else None,
        read_seconds=wait + ANSWER_MARGIN_SECONDS,
    )


def list_executions(
    states: list[str] | None, limit: int, cursor: str | None
) -> Call[ExecutionPage]:
    params: dict[str, str | int | float | list[str]] = {"limit": limit}
    if states:
        params["state"] = states
    if cursor:
        params["cursor"] = cursor
    return Call("GET", "/v1/executions", model(ExecutionPage), params=params)


def cancel(execution_id: str) -> Call[Execution]:
    path = f"/v1/executions/{segment(execution_id)}/cancel"
    return Call("POST", path, model(Execution), read_seconds=DEFAULT_READ_SECONDS * 2)


def read_output(execution_id: str, offset: int, limit: int) -> Call[OutputChunk]:
    params = {"offset": offset, "limit": limit}
    return Call("GET", f"/v1/executions/{segment(execution_id)}/output", _output, params=params)


def search_output(
    execution_id: str, query: str, ignore_case: bool, limit: int | None
) -> Call[OutputSearch]:
    params: dict[str, str | int] = {"q": query}
    if ignore_case:
        params["ignore_case"] = "true"
    if limit is not None:
        params["limit"] = limit
    return Call(
        "GET",
        f"/v1/executions/{segment(execution_id)}/search",
        model(OutputSearch),
        params=params,
    )


def send_input(execution_id: str, data: str) -> Call[None]:
    return Call(
        "POST", f"/v1/executions/{segment(execution_id)}/input", _nothing, json={"data": data}
    )


def resize(execution_id: str, rows: int, cols: int) -> Call[None]:
    body = {"rows": rows, "cols": cols}
    return Call("POST", f"/v1/executions/{segment(execution_id)}/resize", _nothing, json=body)


# --- approvals, policy, sessions, info ------------------------------------------------------------


def list_approvals(state: str | None, limit: int) -> Call[ApprovalList]:
    params: dict[str, str | int | float | list[str]] = {"limit": limit}
    if state:
        params["state"] = state
    return Call("GET", "/v1/approvals", model(ApprovalList), params=params)


def get_approval(approval_id: str) -> Call[Approval]:
    return Call("GET", f"/v1/approvals/{segment(approval_id)}", model(Approval))


def decide(
    approval_id: str, approve: bool, reason: str | None, remember: Remember | None = None
) -> Call[Approval]:
    action = "approve" if approve else "deny"
    path = f"/v1/approvals/{segment(approval_id)}/{action}"
    body: dict[str, object] = {"reason": reason}
    if remember is not None:
        # Sent on a denial too, so the server's 422 says a denial is never remembered.
        body["remember"] = remember.to_json()
    return Call("POST", path, model(Approval), json=body)


def get_policy() -> Call[dict[str, Any]]:
    return Call("GET", "/v1/policy", _json)


def put_policy(document: Mapping[str, Any]) -> Call[dict[str, Any]]:
    return Call("PUT", "/v1/policy", _json, json=dict(document))


def evaluate(
    command: str, env: Mapping[str, str] | None, cwd: str | None, tools: list[str] | None
) -> Call[PolicyEvaluation]:
    body: dict[str, object] = {"command": command}
    if env:
        body["env"] = dict(env)
    if cwd is not None:
        body["cwd"] = cwd
    if tools is not None:
        body["tools"] = tools
    return Call("POST", "/v1/policy/evaluate", model(PolicyEvaluation), json=body)


def replay_policy(
    document: Mapping[str, Any], limit: int | None, since: datetime | str | None
) -> Call[PolicyReplay]:
    params: dict[str, str | int] = {}
    if limit is not None:
        params["limit"] = limit
    if since is not None:
        params["since"] = since.isoformat() if isinstance(since, datetime) else since
    return Call(
        "POST", "/v1/policy/replay", model(PolicyReplay), json=dict(document), params=params
    )


def create_session(fields: Mapping[str, object]) -> Call[Session]:
    body = {key: value for key, value in fields.items() if value is not None}
    return Call("POST", "/v1/sessions", model(Session), json=body)


def get_session(session_id: str) -> Call[Session]:
    return Call("GET", f"/v1/sessions/{segment(session_id)}", model(Session))


def list_sessions() -> Call[SessionList]:
    return Call("GET", "/v1/sessions", model(SessionList))


def update_session(session_id: str, fields: Mapping[str, object]) -> Call[Session]:
    body = {key: value for key, value in fields.items() if value is not None}
    return Call("PATCH", f"/v1/sessions/{segment(session_id)}", model(Session), json=body)


def delete_session(session_id: str) -> Call[None]:
    return Call("DELETE", f"/v1/sessions/{segment(session_id)}", _nothing)


def session_run(session_id: str, command: str, timeout_ms: int | None) -> Call[None]:
    """The runner's request; its NDJSON body is read line by line with `runner_item`."""
    body: dict[str, object] = {"command": command}
    if timeout_ms is not None:
        body["timeout_ms"] = timeout_ms
    # No read deadline: the runner's own deadline (≤ 24 h) bounds the call.
    return Call(
        "POST", f"/v1/sessions/{segment(session_id)}/run", _nothing, json=body, read_seconds=None
    )


def runner_item(line: str) -> RunnerItem:
    body = json.loads(line)
    decode: Callable[[str], bytes] = (
        base64.b64decode if body.get("encoding") == "base64" else str.encode
    )
    return RunnerItem(
        stdout=decode(body.get("stdout") or ""),
        stderr=decode(body.get("stderr") or ""),
        exit_code=body.get("exit_code"),
        signal=body.get("signal"),
        truncated=bool(body.get("truncated")),
    )


def info() -> Call[Info]:
    return Call("GET", "/v1/info", model(Info))


def collect_runner(items: Iterable[tuple[str, RunnerItem]]) -> RunnerResult:
    execution_id = ""
    stdout: list[bytes] = []
    stderr: list[bytes] = []
    last: RunnerItem | None = None
    for execution_id_of_item, item in items:
        execution_id = execution_id_of_item
        stdout.append(item.stdout)
        stderr.append(item.stderr)
        last = item
    return RunnerResult(
        execution_id=execution_id,
        stdout=b"".join(stdout),
        stderr=b"".join(stderr),
        exit_code=last.exit_code if last else None,
        signal=last.signal if last else None,
    )
