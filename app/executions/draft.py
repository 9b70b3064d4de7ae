"""A request's checks and rewrites, before anything runs: the `Draft` they produce and the pure
rules every entry point applies the same way (size, env names, the leading `cd`, artifact
references, the working directory, the timeout). No I/O here except `check_directory`'s stat."""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import asdict, dataclass, fields
from typing import Any, get_args

from app.core.config import Role
from app.core.errors import InvalidRequestError, StaleApprovalError
from app.core.random_ids import random_token
from app.executions.timeouts import DEFAULT_TIMEOUT, ResolvedTimeout, resolve_timeout
from app.policy.shell.syntax import extract_leading_cd
from app.policy.working_directory import working_directory
from app.schemas import ExecutionCreate

ARTIFACT_URL = re.compile(r"artifact://(ex_[A-Za-z0-9_-]{8,64})")
PTY_ROWS = (5, 200)
PTY_COLS = (20, 400)
RUNNER_PTY_SIZE = (24, 80)  # the streaming runner's terminal
# The shape of a stored draft (a pending approval outlives the server that wrote it). Bump it
# when a field changes meaning; `Draft.from_json` reads every older shape.
DRAFT_VERSION = 1


def new_execution_id() -> str:
    return "ex_" + random_token(15)


def clamp(value: int, bounds: tuple[int, int]) -> int:
    return max(bounds[0], min(bounds[1], value))


@dataclass
class Draft:
    """A request that passed validation, the `cd` rewrite and the policy; JSON-serialisable so
    that it survives a restart while its approval is pending."""

    original_command: str
    command: str
    cwd_request: str | None = None
    env: dict[str, str] | None = None
    # None: the request did not ask for one; the server's default applies (resolve_draft_timeout).
    timeout: float | None = 300
    pty: bool = False
    async_: bool = False
    session: str | None = None
    tools: list[str] | None = None
    rows: int = 40
    cols: int = 120
    # A streaming-runner call (`POST /v1/sessions/{id}/run`): `timeout` is not clamped to the
    # executions' 1..3600 s range and the call never auto-backgrounds while its caller streams.
    streamed: bool = False
    # Resource limits the request asked for (only lower than the server's; see confinement).
    limits: dict[str, int | None] | None = None
    # What the approver was shown besides the command (set when the draft waits for an
    # approval): the working directory and the whole env (the session's overlaid by the
    # call's). An approved draft runs only if these are still what it would run with.
    shown_cwd: str | None = None
    shown_env: dict[str, str] | None = None
    # Completion delivery (the admitted URL) and the idle timeout (executions/idle.py).
    notify_url: str | None = None
    idle_timeout: float | None = None
    idle_action: str = "background"
    # The policy's word on it (recorded as the execution's `reason`), the remembered rule that
    # allowed it, and for a prompt the pattern offered to remember (docs/policy.md).
    policy_reason: str | None = None
    remembered_rule: str | None = None
    suggested_pattern: str | None = None
    # The sandbox profile this one execution runs with (its record form,
    # `SandboxProfile.to_record()`), when the policy or an approved request decided one;
    # None: its session's, else the server's default (app/sandbox/boundary.py).
    sandbox: dict[str, Any] | None = None
    # What the request asks beyond the profile, as the approver is shown it (kind `sandbox`).
    sandbox_request: dict[str, Any] | None = None

    def to_json(self) -> str:
        return json.dumps({"version": DRAFT_VERSION, **asdict(self)})

    @classmethod
    def from_json(cls, text: str) -> Draft:
        """Any draft this or an older server stored (version 0 had no tag). Unknown keys are
        dropped and missing ones take their defaults; a draft from a newer server, or without
        its command, is refused (ValueError) rather than guessed at."""
        data: dict[str, Any] = json.loads(text)
        version = data.pop("version", 0)
        if not isinstance(version, int) or version > DRAFT_VERSION:
            raise ValueError(f"stored draft has version {version!r}; this server reads ≤ 1")
        known = {field.name for field in fields(cls)}
        values = {key: value for key, value in data.items() if key in known}
        if not isinstance(values.get("command"), str):
            raise ValueError("stored draft has no command")
        values.setdefault("original_command", values["command"])
        return cls(**values)


def pending_request_json(owner_role: str, draft: Draft) -> str:
    """What an execution awaiting approval stores so that it can start after a restart."""
    return json.dumps({"owner_role": owner_role, "draft": draft.to_json()})


def read_pending_request(text: str | None) -> tuple[Role, Draft]:
    """The owner's role and the draft of `pending_request_json` (ValueError/KeyError if absent
    or unreadable: the approved command then fails to start rather than run as something else)."""
    pending = json.loads(text or "{}")
    role = pending.get("owner_role", "agent")
    if role not in get_args(Role):
        raise ValueError(f"stored owner role {role!r} is not a role")
    return role, Draft.from_json(pending["draft"])


# --- checks -----------------------------------------------------------------------------------


def validate_command(command: str, *, max_bytes: int) -> None:
    size = len(command.encode("utf-8", "surrogatepass"))
    if size == 0:
        raise InvalidRequestError("command must not be empty")
    if size > max_bytes:
        raise InvalidRequestError(f"command is {size} bytes; the limit is {max_bytes} bytes")
    if "\0" in command:
        raise InvalidRequestError("command must not contain a NUL byte")


def effective_env(
    session_env: dict[str, str] | None, call_env: dict[str, str] | None
) -> dict[str, str]:
    """The env a request lays over the host's: the session's, then the call's own."""
    return {**(session_env or {}), **(call_env or {})}


def check_as_shown(draft: Draft, *, session_env: dict[str, str] | None, base: str) -> None:
    """An approved draft runs only with the cwd and env its approver saw: a session changed
    (PATCH) in between makes it stale, and it does not run (StaleApprovalError)."""
    if draft.shown_env is not None and effective_env(session_env, draft.env) != draft.shown_env:
        raise StaleApprovalError(
            "The session's environment changed after the approval was requested; "
            "nothing ran. Ask again."
        )
    if draft.shown_cwd is None:
        return
    here = working_directory(draft.cwd_request, base)
    if here == draft.shown_cwd:
        return
    if draft.session is not None:
        raise StaleApprovalError(
            "The session's working directory changed after the approval was requested; "
            "nothing ran. Ask again."
        )
    # No session: the workspace itself differs, on a server restarted with another
    # SHELLGATE_WORKSPACE or on another replica settling a dead one's approval.
    raise StaleApprovalError(
        f"The approver was shown the working directory {draft.shown_cwd}, but this server "
        f"would run the command in {here} (its workspace differs from the one of the server "
        "that asked); nothing ran. Ask again."
    )


# --- drafts -----------------------------------------------------------------------------------


def draft_from_request(request: ExecutionCreate, *, session_pty: bool | None) -> Draft:
    """The request with a leading `cd DIR &&` turned into its working directory; `session_pty`
    is the session's default for a request that did not say `pty`."""
    command, cwd_request = request.command, request.cwd or None
    if cwd_request is None:
        leading = extract_leading_cd(command)
        if leading is not None:
            cwd_request, command = leading.target, leading.rest
    check_cwd_artifacts(cwd_request)
    pty = request.pty
    if session_pty is not None and "pty" not in request.model_fields_set:
        pty = session_pty
    return Draft(
        original_command=request.command,
        command=command,
        cwd_request=cwd_request,
        env=request.env or None,
        timeout=request.timeout if "timeout" in request.model_fields_set else None,
        pty=pty,
        async_=request.async_,
        session=request.session,
        tools=request.tools,
        rows=clamp(request.rows, PTY_ROWS),
        cols=clamp(request.cols, PTY_COLS),
        limits=request.limits.model_dump(exclude_none=True) if request.limits else None,
        idle_timeout=request.idle_timeout,
        idle_action=request.idle_action,
    )


def runner_draft(command: str, *, session_id: str, timeout_seconds: float, pty: bool) -> Draft:
    """A streaming-runner call: the command as given, in its session, on the runner's terminal."""
    return Draft(
        original_command=command,
        command=command,
        timeout=timeout_seconds,
        pty=pty,
        session=session_id,
        rows=RUNNER_PTY_SIZE[0],
        cols=RUNNER_PTY_SIZE[1],
        streamed=True,
    )


def resolve_draft_timeout(draft: Draft, *, max_timeout: float) -> ResolvedTimeout:
    if draft.timeout is None:
        # Nobody asked for 300 s: under a lower SHELLGATE_MAX_TIMEOUT the default is the
        # ceiling, without a "clamped (requested 300s)" notice on every call.
        seconds = min(DEFAULT_TIMEOUT, max_timeout) if max_timeout > 0 else DEFAULT_TIMEOUT
        return ResolvedTimeout(seconds=seconds, requested=seconds)
    if draft.streamed:
        # The runner's deadline is the session's timeout_ms (or the call's raised one) as
        # given: the 1..3600 s clamp belongs to executions; the server ceiling still holds.
        seconds = min(draft.timeout, max_timeout) if max_timeout > 0 else draft.timeout
        return ResolvedTimeout(seconds=seconds, requested=draft.timeout)
    return resolve_timeout(draft.timeout, global_max=max_timeout)


# --- artifact references ----------------------------------------------------------------------


@dataclass(frozen=True)
class Expanded:
    """The draft's texts with `artifact://ex_…` replaced by log paths."""

    command: str
    env: dict[str, str] | None
    cwd_request: str | None
    # The logs it names, which the sandbox shows it read-only inside the hidden data dir.
    artifact_paths: tuple[str, ...] = ()


def referenced_artifacts(draft: Draft) -> set[str]:
    texts = [draft.command, draft.cwd_request or "", *(draft.env or {}).values()]
    return {match for text in texts for match in ARTIFACT_URL.findall(text)}


def check_cwd_artifacts(cwd_request: str | None) -> None:
    """A log is a file: a `cwd` that goes on past an `artifact://` reference (`…/..`) would
    lead, once expanded, to a directory the policy never judged and the approver never saw
    (they see the text as written). Refused (422) before the policy."""
    for match in ARTIFACT_URL.finditer(cwd_request or ""):
        if match.end() < len(cwd_request or ""):
            raise InvalidRequestError(
                f"cwd: artifact://{match.group(1)} names a log file; nothing may follow it"
            )


def expand_artifacts(draft: Draft, paths: dict[str, str]) -> Expanded:
    """`paths`: the log path of every id `referenced_artifacts` found (checked by the caller).
    The command gets shell-quoted paths; env values and the cwd take them as they are."""
    if not paths:
        return Expanded(draft.command, draft.env, draft.cwd_request)

    def expand(text: str, quote: bool) -> str:
        def replace(match: re.Match[str]) -> str:
            path = paths[match.group(1)]
            return shlex.quote(path) if quote else path

        return ARTIFACT_URL.sub(replace, text)

    env = {key: expand(value, False) for key, value in draft.env.items()} if draft.env else None
    cwd = expand(draft.cwd_request, False) if draft.cwd_request else None
    return Expanded(expand(draft.command, True), env, cwd, tuple(paths.values()))


# --- working directory ------------------------------------------------------------------------


def resolve_cwd(cwd_request: str | None, base: str) -> str:
    """The validated working directory (does a stat: call it from a thread)."""
    resolved = working_directory(cwd_request, base)
    check_directory(resolved)
    return resolved


def check_directory(resolved: str) -> None:
    """Refuse a working directory that is missing or not a directory (a stat: call it from a
    thread; on the event loop it gives up the interpreter lock and may wait for it)."""
    try:
        is_dir = os.path.isdir(resolved)
        exists = is_dir or os.path.exists(resolved)
    except (OSError, ValueError):
        exists = is_dir = False
    if not exists:
        raise InvalidRequestError(f"Working directory does not exist: {resolved}")
    if not is_dir:
        raise InvalidRequestError(f"Working directory is not a directory: {resolved}")


def shown_cwd(cwd_request: str | None, base: str) -> str:
    """Where the command would run, as shown to an approver (and judged by the policy): not
    checked yet, since the working directory is resolved only once the command is approved
    (after the policy). The same spelling as `resolve_cwd`'s, so what is shown is what runs."""
    return working_directory(cwd_request, base)
