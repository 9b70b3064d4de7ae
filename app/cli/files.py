"""`shellgate files get|put`: copy files to and from the server's machine through the files API
(docs/api.md#files), streamed both ways, never whole in memory.

Both go through the SDK (docs/sdk.md#files): a download lands in a temporary file beside LOCAL
and is renamed over it once complete, resumed with `Range` if the connection drops; an upload
is checked against the sha256 the server computed of what it stored (a mismatch is exit 3).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import typer

from app.cli.connection import EXIT_NOT_FINISHED, EXIT_REFUSED, fail, server
from app.core.visible_text import visible
from shellgate import ApprovalPendingError

files_cli = typer.Typer(
    help="Copy files to and from the server's machine (relative remote paths are in its "
    "workspace).",
    no_args_is_help=True,
)

APPROVAL_WAIT = typer.Option(
    30.0,
    "--approval-wait",
    min=0,
    max=3600,
    help="Seconds to hold for a human decision when the policy asks for one.",
)
APPROVAL_ID = typer.Option(
    None, "--approval-id", help="Re-send a transfer that awaited this approval, once approved."
)


def _awaiting(pending: ApprovalPendingError) -> NoReturn:
    operation = pending.operation
    fail(
        f"the {operation.op} of {operation.path} awaits approval {pending.approval_id} "
        f"({operation.reason}); once approved, run the same command with "
        f"--approval-id {pending.approval_id} (to withdraw it: shellgate files cancel "
        f"{operation.id})",
        EXIT_NOT_FINISHED,
    )


@files_cli.command("get")
def files_get(
    ctx: typer.Context,
    remote: str = typer.Argument(..., metavar="REMOTE"),
    local: str | None = typer.Argument(
        None, metavar="[LOCAL]", help="Default: REMOTE's name in this directory; `-`: stdout."
    ),
    approval_wait: float = APPROVAL_WAIT,
    approval_id: str | None = APPROVAL_ID,
) -> None:
    """Download REMOTE from the server to LOCAL (resumed where it stopped if the connection
    drops)."""
    target = Path(local if local is not None else (Path(remote).name or "download"))
    if local != "-" and target.is_dir():
        target = target / (Path(remote).name or "download")
    with server(ctx) as client:
        try:
            if local == "-":
                for chunk in client.iter_file(
                    remote, approval_wait=approval_wait, approval_id=approval_id
                ):
                    sys.stdout.buffer.write(chunk)
                sys.stdout.buffer.flush()
                return
            saved = client.download_file(
                remote, target, approval_wait=approval_wait, approval_id=approval_id
            )
        except ApprovalPendingError as pending:
            _awaiting(pending)
        except OSError as error:
            fail(f"cannot write {target}: {error.strerror}", EXIT_REFUSED)
    # Paths are names anyone may have planted (`\r`, `\x1b[2K`, U+202E): shown as escapes.
    typer.echo(f"{visible(remote)} -> {visible(str(target))} ({saved.size} bytes)")


@files_cli.command("put")
def files_put(
    ctx: typer.Context,
    local: Path = typer.Argument(..., metavar="LOCAL"),
    remote: str = typer.Argument(..., metavar="REMOTE"),
    mode: str | None = typer.Option(
        None,
        "--mode",
        help="Octal permissions (0644), not setuid or setgid; default: the replaced file's "
        "less setuid and setgid, or 0644.",
    ),
    approval_wait: float = APPROVAL_WAIT,
    approval_id: str | None = APPROVAL_ID,
    parents: bool = typer.Option(
        False,
        "--parents",
        "-p",
        help="Make REMOTE's missing directories first (each judged by the policy).",
    ),
) -> None:
    """Upload LOCAL to REMOTE on the server (replaced whole and at once; checked by sha256).
    A REMOTE that ends with `/` is a directory: the file keeps LOCAL's name there."""
    if remote.endswith("/"):
        remote += local.name
    try:
        handle = local.open("rb")
    except OSError as error:
        fail(f"cannot read {local}: {error.strerror}", EXIT_REFUSED)
    with handle, server(ctx) as client:
        try:
            stored = client.put_file(
                remote,
                handle,
                mode=mode,
                approval_wait=approval_wait,
                approval_id=approval_id,
                parents=parents,
            )
        except ApprovalPendingError as pending:
            _awaiting(pending)
    typer.echo(
        f"{visible(str(local))} -> {visible(stored.path)} ({stored.size} bytes, mode {stored.mode})"
    )


@files_cli.command("cancel")
def files_cancel(
    ctx: typer.Context,
    operation_id: str = typer.Argument(..., metavar="OPERATION_ID"),
) -> None:
    """Withdraw the approval a prompted transfer (OPERATION_ID, `fo_…`) awaits: the operation
    ends rejected and its --approval-id no longer works."""
    with server(ctx) as client:
        record = client.cancel_file_operation(operation_id)
    typer.echo(f"{record.id} {record.state}: {visible(record.message or '')}")
