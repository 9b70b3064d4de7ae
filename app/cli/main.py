"""`shellgate` command line: serve the API, export the OpenAPI document, and the client
commands (run, jobs, logs, wait, cancel, attach, approvals, approve, deny, policy, files, token)
that talk to a running server through the SDK (sdk/shellgate/).

Exit statuses of the client commands: a finished command's own exit code; 1 when it did not
finish normally (timed out, cancelled, rejected, lost, awaiting approval, still running); 2 for
usage errors and the server refusing a request (4xx); 3 when the server cannot be reached or
failed (5xx). `policy check` exits with the verdict: 0 allow, 10 prompt, 11 deny.

The token is taken from the first of: `--token`, `SHELLGATE_TOKEN`, the generated admin token
file in the data directory.
"""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime
from enum import StrEnum
from typing import Any, NoReturn

import typer
import typer.core
from rich.console import Console
from rich.table import Table
from rich.text import Text

from app.cli.arguments import (
    CommandWords,
    command_text,
    parse_duration,
    parse_env,
    sandbox_request,
)
from app.cli.attach import attach
from app.cli.connection import (
    EXIT_NOT_FINISHED,
    ConnectionOptions,
    execution_id_argument,
    generated_token_path,
)
from app.cli.connection import fail as _fail
from app.cli.connection import server as _server
from app.cli.files import files_cli
from app.cli.policy import policy_cli
from app.core.visible_text import pieces, visible
from shellgate import (
    DEFAULT_URL,
    ApiError,
    Approval,
    Client,
    Execution,
    OutputFrame,
    Remember,
)

cli = typer.Typer(
    help="shellgate: run bash commands for remote agents, safely.", no_args_is_help=True
)


@cli.command()
def serve(
    host: str | None = typer.Option(None, help="Overrides SHELLGATE_HOST."),
    port: int | None = typer.Option(None, help="Overrides SHELLGATE_PORT."),
) -> None:
    """Apply migrations and serve the API (uvicorn)."""
    # A plain `shellgate serve` does not come here (app/entry.py); this is `serve` reached
    # through the CLI's own parsing, with the same behaviour.
    from app.server.serve_command import serve as serve_api

    serve_api(host=host, port=port)


@cli.command()
def openapi() -> None:
    """Print the OpenAPI document (what `openapi.json` at the repo root holds)."""
    from app.api.openapi_export import openapi_document

    sys.stdout.write(json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n")


# ---------------------------------------------------------------------------------------------
# Client commands

# Ctrl-C: the shell's 128 + SIGINT.
EXIT_INTERRUPTED = 130
COMMAND_COLUMN_CHARS = 60
# What the command column folds into one space: blanks, a word break to bash and nothing more.
_FOLDED_BLANKS = re.compile(r"[ \t]+")
# How a table marks a character it shows as an escape (`\x1b`, `\u202e`): apart from the same
# four characters typed by the command's author.
ESCAPE_STYLE = "reverse"
FOREGROUND_POLL_SECONDS = 60.0


class IdleAction(StrEnum):
    background = "background"
    cancel = "cancel"


UNFINISHED_STATES = {
    "timed_out": "timed out",
    "cancelled": "was cancelled",
    "rejected": "was rejected",
    "lost": "was lost (the server stopped while it ran)",
}


@cli.callback()
def connection_options(
    ctx: typer.Context,
    url: str = typer.Option(
        DEFAULT_URL, "--url", envvar="SHELLGATE_URL", help="Server base URL (client commands)."
    ),
    token: str | None = typer.Option(
        None,
        "--token",
        envvar="SHELLGATE_TOKEN",
        show_default=False,
        help="Bearer token (client commands). Order: --token, then SHELLGATE_TOKEN, then the "
        "generated admin token file in the data directory (data/admin.token) if present.",
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Say which token source is used."),
) -> None:
    source = None
    if token:
        # typer vendors its own click, so compare the source by name rather than by enum member.
        parameter_source = ctx.get_parameter_source("token")
        from_env = parameter_source is not None and parameter_source.name == "ENVIRONMENT"
        source = "SHELLGATE_TOKEN" if from_env else "--token"
    ctx.obj = ConnectionOptions(url=url, token=token or None, token_source=source, verbose=verbose)


def _fell_silent(execution: Execution) -> bool:
    """The server answered because of --idle-timeout (its notice is on the answer)."""
    return any(notice.startswith("No output for ") for notice in execution.notices)


def _print_result(execution: Execution) -> None:
    """The result text on stdout; none for a command that has not run yet (awaiting approval:
    its text would be a misleading "(no output)"; stderr says what it waits for)."""
    if execution.state != "awaiting_approval":
        typer.echo(execution.text)


def _exit_with_outcome(execution: Execution) -> NoReturn:
    """The execution's own exit code when it finished; 1 with a one-line reason otherwise."""
    state = execution.state
    if state in ("completed", "failed"):
        code = execution.exit_code
        raise typer.Exit(code if code is not None else EXIT_NOT_FINISHED)
    if state in UNFINISHED_STATES:
        _fail(f"execution {execution.id} {UNFINISHED_STATES[state]}", EXIT_NOT_FINISHED)
    if state == "awaiting_approval":
        approval = f" (approval {execution.approval.id})" if execution.approval else ""
        _fail(
            f"execution {execution.id} is awaiting approval{approval}; "
            f"see `shellgate wait {execution.id}` once it is decided",
            EXIT_NOT_FINISHED,
        )
    _fail(
        f"execution {execution.id} is still running as a job; "
        f"see `shellgate wait {execution.id}` or `shellgate logs --follow {execution.id}`",
        EXIT_NOT_FINISHED,
    )


def _when(moment: datetime | None) -> str:
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S") if moment else ""


def _cut(text: str, limit: int = COMMAND_COLUMN_CHARS) -> str:
    """`text` cut to `limit`, each run of spaces and tabs folded into one space. Nothing else
    folds: `str.split()` also took line feeds, `\r`, NEL, U+2028 and no-break spaces for
    spaces, so `a\nrm x` showed as `a rm x`, `rm\u00a0-rf` as `rm -rf` (`_shown` marks each
    as an escape: `\n`, `\xa0`)."""
    flat = " ".join(_FOLDED_BLANKS.split(text.strip(" \t")))
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _shown(text: str, *, keep: str = "") -> Text:
    """Text from the server (a command, an owner, a cwd, an env value) for a table cell: never
    read as rich markup (`[link=…]`, `[/]`), and every character that would not show as itself
    (a carriage return, an escape sequence, a bidi override, a zero-width character; those in
    `keep` aside) written as a marked escape, so the cell shows all of what runs."""
    shown = Text()
    for piece, escaped in pieces(text, keep=keep):
        shown.append(piece, style=ESCAPE_STYLE if escaped else "")
    return shown


def _approval_cell(approval: Approval) -> Text:
    """All of an approval's command (a table cut would hide its end), then the cwd and env it
    runs with. Each line break of the command is a marked `\\n` before the break, so that a
    break the table makes to fold a long line never reads as one of the command's."""
    cell = Text()
    for number, line in enumerate(approval.command.split("\n")):
        if number:
            cell.append("\\n", style=ESCAPE_STYLE)
            cell.append("\n")
        cell.append_text(_shown(line))
    cell.append("\ncwd ", style="dim")
    cell.append_text(_shown(approval.cwd))
    for name, value in approval.env.items():
        cell.append("\nenv ", style="dim")
        cell.append_text(_shown(f"{name}={value}"))
    if approval.suggested_pattern is not None:
        # What `approve ID --remember` remembers unless `--pattern` says otherwise.
        cell.append("\nremember ", style="dim")
        cell.append_text(_shown(approval.suggested_pattern))
    return cell


def _console() -> Console:
    console = Console()
    # Piped output goes to scripts and pagers: do not fold tables at rich's 80-column default.
    return console if console.is_terminal else Console(width=200)


@cli.command(cls=CommandWords)
def run(
    ctx: typer.Context,
    words: list[str] = typer.Argument(
        ...,
        metavar="COMMAND...",
        help="Shell text, run as `bash -c COMMAND`; several words are joined with spaces (as "
        "ssh does). Put `--` before a command whose words start with `-`.",
    ),
    cwd: str | None = typer.Option(None, help="Working directory on the server."),
    timeout: float | None = typer.Option(
        None, help="Seconds (server default 300; 0 disables the deadline)."
    ),
    run_async: bool = typer.Option(False, "--async", help="Start a background job; print its id."),
    env: list[str] = typer.Option([], "--env", help="KEY=VALUE, repeatable."),
    session: str | None = typer.Option(
        None, "--session", metavar="ID", help="Run in this session (its cwd and env carry over)."
    ),
    pty: bool = typer.Option(False, "--pty", help="Run in a pseudo-terminal."),
    raw: bool = typer.Option(
        False,
        "--raw",
        help="Print the output byte-exact (stdout and stderr merged, no result text) once it "
        "ends; notices go to stderr.",
    ),
    approval_wait: float | None = typer.Option(
        None,
        "--approval-wait",
        metavar="SECONDS",
        min=0,
        max=3600,
        help="Seconds the server waits for an approval before answering (server default 30).",
    ),
    idle_timeout: float | None = typer.Option(
        None,
        "--idle-timeout",
        metavar="SECONDS",
        min=0.001,
        max=3600,
        help="Stop waiting (or cancel, see --idle-action) after this long without output.",
    ),
    idle_action: IdleAction = typer.Option(
        IdleAction.background,
        "--idle-action",
        help="What --idle-timeout does: leave it running as a job, or cancel it.",
    ),
    notify_url: str | None = typer.Option(
        None, "--notify-url", metavar="URL", help="POST the final record here (signed)."
    ),
    sandbox_write: list[str] = typer.Option(
        [],
        "--sandbox-write",
        metavar="PATH",
        help="Ask to write PATH beyond the sandbox profile (repeatable; an approver decides).",
    ),
    sandbox_network: str | None = typer.Option(
        None,
        "--sandbox-network",
        metavar="on|off|HOST[,HOST…]",
        help="Ask for this network beyond the sandbox profile (an approver decides).",
    ),
    justification: str | None = typer.Option(
        None, "--justification", metavar="TEXT", help="Why it needs more: shown to the approver."
    ),
) -> None:
    """Run a command; print its result text; exit with its exit code.

    A call the server auto-backgrounds is waited for here until it ends; one that fell silent
    for --idle-timeout is not: its text and job id are printed and the exit code is 1."""
    command = command_text(words)
    environment = parse_env(env)
    # What the server does once the command ends or falls silent (docs/api.md).
    later: dict[str, Any] = {"notify_url": notify_url, "idle_timeout": idle_timeout}
    if idle_timeout is not None:
        later["idle_action"] = idle_action.value
    later["sandbox"] = sandbox_request(sandbox_write, sandbox_network, justification)
    if session is not None and not session.strip():
        raise typer.BadParameter("must not be empty", param_hint="--session")
    if raw and run_async:
        raise typer.BadParameter("--async prints the job's id, not its output", param_hint="--raw")
    with _server(ctx) as client:
        try:
            if run_async:
                execution = client.start(
                    command,
                    cwd=cwd,
                    timeout=timeout,
                    env=environment,
                    session=session,
                    pty=pty,
                    **later,
                )
            else:
                execution = client.run(
                    command,
                    cwd=cwd,
                    timeout=timeout,
                    env=environment,
                    session=session,
                    pty=pty,
                    approval_wait=approval_wait,
                    follow=False,
                    **later,
                )
        except ApiError as error:
            if error.code != "approval_rejected":
                raise
            _fail(error.message, EXIT_NOT_FINISHED)
        except KeyboardInterrupt:
            # A foreground call whose client goes away keeps running (docs/api.md): say so.
            _fail(
                "interrupted before the server answered; the command goes on under its "
                "timeout if it started (`shellgate jobs --state running` lists it, "
                "`shellgate cancel ID` stops it)",
                EXIT_INTERRUPTED,
            )
        if run_async:
            typer.echo(execution.id)  # stdout stays the id alone: scripts capture it
            if execution.state == "awaiting_approval":
                approval = f" (approval {execution.approval.id})" if execution.approval else ""
                typer.echo(
                    f"execution {execution.id} awaits approval{approval}; it runs once "
                    f"approved (`shellgate wait {execution.id}`)",
                    err=True,
                )
            return
        # The server auto-backgrounds a long foreground call; a terminal user still wants the
        # result, and the command's own timeout bounds this wait.
        try:
            while execution.state == "running" and not _fell_silent(execution):
                execution = client.wait(execution.id, timeout=FOREGROUND_POLL_SECONDS)
        except KeyboardInterrupt:
            _fail(
                f"interrupted; execution {execution.id} goes on running on the server "
                f"(`shellgate wait {execution.id}` waits again, "
                f"`shellgate cancel {execution.id}` stops it)",
                EXIT_INTERRUPTED,
            )
        if raw and execution.state != "awaiting_approval" and not _fell_silent(execution):
            # The result text is for a model (CRLF folded, invalid bytes replaced, long lines
            # and the middle of long output cut); a script piping the output wants the bytes.
            _write_log(client, execution.id)
            for notice in execution.notices:
                # A notice may quote a denier's reason or a cwd: shown as text, like errors.
                typer.echo(f"shellgate: {visible(notice)}", err=True)
            _exit_with_outcome(execution)
    _print_result(execution)
    _exit_with_outcome(execution)


@cli.command()
def wait(
    ctx: typer.Context,
    execution_id: str = execution_id_argument(),
    seconds: float = typer.Option(60, min=0, max=600, help="Longest wait for a terminal state."),
) -> None:
    """Wait for an execution to end; print its result text; exit with its exit code."""
    with _server(ctx) as client:
        execution = client.wait(execution_id, timeout=seconds)
    _print_result(execution)
    _exit_with_outcome(execution)


@cli.command()
def cancel(ctx: typer.Context, execution_id: str = execution_id_argument()) -> None:
    """Cancel a running or awaiting execution (its whole process group is ended)."""
    with _server(ctx) as client:
        execution = client.cancel(execution_id)
    typer.echo(f"{execution.id} {execution.state}")


@cli.command()
def jobs(
    ctx: typer.Context,
    state: list[str] = typer.Option([], help="Filter by state; repeatable."),
    limit: int = typer.Option(20, min=1, max=500),
    as_json: bool = typer.Option(False, "--json", help="Print the JSON page instead."),
) -> None:
    """List executions, newest first."""
    with _server(ctx) as client:
        page = client.list_executions(state=state or None, limit=limit)
    if as_json:
        typer.echo(page.model_dump_json(indent=2))
        return
    if not page.data:
        typer.echo("none")
        return
    # An approver or admin lists everyone's: say whose each one is.
    table = Table("id", "state", "exit", "owner", "created", "command")
    for execution in page.data:
        exit_code = "" if execution.exit_code is None else str(execution.exit_code)
        table.add_row(
            execution.id,
            execution.state,
            exit_code,
            _shown(execution.owner),
            _when(execution.created_at),
            _shown(_cut(execution.command)),
        )
    _console().print(table)


@cli.command()
def logs(
    ctx: typer.Context,
    execution_id: str = execution_id_argument(),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep reading until it ends."),
) -> None:
    """Write an execution's raw output log (stdout and stderr merged) from byte 0, byte-exact."""
    out = sys.stdout.buffer
    with _server(ctx) as client:
        if follow:
            for frame in client.stream(execution_id):
                if isinstance(frame, OutputFrame):
                    out.write(frame.data)
                    out.flush()
            return
        _write_log(client, execution_id)


def _write_log(client: Client, execution_id: str) -> None:
    """The log as written so far, from byte 0, byte-exact, to stdout."""
    out = sys.stdout.buffer
    offset = 0
    while True:
        page = client.read(execution_id, offset=offset)
        if page.data:
            out.write(page.data)
            out.flush()
        # X-Next-Offset may jump past a dropped middle of a capped log with no data read.
        progressed = page.next_offset > offset
        offset = page.next_offset
        if page.complete and offset >= page.total_bytes:
            return
        if not progressed:
            return


@cli.command()
def approvals(
    ctx: typer.Context,
    state: str = typer.Option("pending", help="pending, approved, denied, expired or all."),
    limit: int = typer.Option(100, min=1, max=500),
    as_json: bool = typer.Option(False, "--json", help="Print the JSON list instead."),
) -> None:
    """List approvals (pending ones by default)."""
    with _server(ctx) as client:
        listing = client.list_approvals(state=None if state == "all" else state, limit=limit)
    if as_json:
        typer.echo(listing.model_dump_json(indent=2))
        return
    if not listing.data:
        typer.echo("none")
        return
    # Decided ones are listed with who decided and why (a pending list has neither yet).
    decisions = state != "pending"
    table = Table("id", "state", "waits", "requested by", "expires")
    if decisions:
        table.add_column("decided by")
        table.add_column("decision reason", overflow="fold")
    table.add_column("command", overflow="fold")
    for approval in listing.data:
        decided = (
            [_shown(approval.decided_by or ""), _shown(approval.decision_reason or "")]
            if decisions
            else []
        )
        table.add_row(
            approval.id,
            approval.state,
            approval.execution_id or approval.file_operation_id or "",
            _shown(approval.requested_by),
            _when(approval.expires_at),
            *decided,
            _approval_cell(approval),
        )
    _console().print(table)


def _decide(
    ctx: typer.Context,
    approval_id: str,
    *,
    approve: bool,
    reason: str | None,
    remember: Remember | None = None,
) -> None:
    with _server(ctx) as client:
        approval = client.decide(approval_id, approve=approve, reason=reason, remember=remember)
        rule = _remembered_rule(client, approval.remembered_rule)
    subject = {
        "execution": f"execution {approval.execution_id}",
        "file_operation": f"file operation {approval.file_operation_id}",
    }.get(approval.subject, "a new session's sandbox")
    typer.echo(f"{approval.id} {approval.state} ({subject})")
    if approval.remembered_rule is not None:
        typer.echo(f"remembered {approval.remembered_rule}" + (f": {rule}" if rule else ""))


def _remembered_rule(client: Client, rule_id: str | None) -> str | None:
    """`pattern for owner until when` of the rule `rule_id`, as `GET /v1/policy` lists it."""
    if rule_id is None:
        return None
    for rule in client.get_policy().get("remembered", []):
        if rule.get("id") == rule_id:
            whom = rule.get("owner") or "everyone"
            return visible(f"{rule['match']} for {whom} until {rule['expires_at']}")
    return None


class RememberScope(StrEnum):
    owner = "owner"
    all = "all"


@cli.command()
def approve(
    ctx: typer.Context,
    approval_id: str = typer.Argument(..., metavar="ID"),
    reason: str | None = typer.Option(None, help="Why; stored with the decision."),
    remember: bool = typer.Option(
        False,
        "--remember",
        help="Also let calls like this one run without a prompt for a while "
        "(docs/policy.md#remembered-decisions).",
    ),
    pattern: str | None = typer.Option(
        None,
        "--pattern",
        help="With --remember: the rule glob to remember (default: the approval's suggested "
        "pattern, shown by `shellgate approvals`).",
    ),
    scope: RememberScope | None = typer.Option(
        None,
        "--scope",
        help="With --remember: owner (the requester's calls, the default) or all (everyone's; "
        "admins only).",
    ),
    duration: str | None = typer.Option(
        None,
        "--for",
        metavar="DURATION",
        help="With --remember: how long (90s, 30m, 1h, 7d; default 1h).",
    ),
) -> None:
    """Approve a pending approval: its command runs."""
    choice = None
    if remember:
        choice = Remember(
            pattern=pattern,
            scope=(scope or RememberScope.owner).value,
            for_seconds=parse_duration(duration or "1h", option="--for"),
        )
    elif pattern is not None or scope is not None or duration is not None:
        raise typer.BadParameter("--pattern, --scope and --for go with --remember")
    _decide(ctx, approval_id, approve=True, reason=reason, remember=choice)


@cli.command()
def deny(
    ctx: typer.Context,
    approval_id: str = typer.Argument(..., metavar="ID"),
    reason: str | None = typer.Option(None, help="Why; the requester sees it."),
) -> None:
    """Deny a pending approval: its execution ends `rejected`."""
    _decide(ctx, approval_id, approve=False, reason=reason)


cli.add_typer(files_cli, name="files")
cli.add_typer(policy_cli, name="policy")
cli.command()(attach)


@cli.command()
def token() -> None:
    """Print where the generated admin token file is and whether it exists (no network)."""
    path = generated_token_path().resolve()
    exists = path.is_file()
    typer.echo(f"{path} ({'exists' if exists else 'does not exist'})")
    if not exists:
        raise typer.Exit(1)


def main() -> None:
    cli()
