"""`shellgate files get|put`: copy files to and from the server's machine through the files API
(docs/api.md#files), streamed both ways, never whole in memory.

A download lands in a temporary file beside LOCAL and is renamed over it once complete; an
upload is checked against the sha256 the server computed of what it stored.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from app.cli_connection import EXIT_NOT_FINISHED, EXIT_REFUSED, EXIT_UNREACHABLE, fail, server
from app.client import ANSWER_MARGIN_SECONDS

CHUNK_BYTES = 1024 * 1024

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


def _awaiting(record: dict[str, Any]) -> None:
    approval = record.get("approval_id")
    fail(
        f"the {record.get('op')} of {record.get('path')} awaits approval {approval} "
        f"({record.get('reason')}); once approved, run the same command with "
        f"--approval-id {approval}",
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
    """Download REMOTE from the server to LOCAL."""
    target = Path(local if local is not None else (Path(remote).name or "download"))
    if local != "-" and target.is_dir():
        target = target / (Path(remote).name or "download")
    params: dict[str, str | int | float] = {"path": remote, "approval_wait": approval_wait}
    if approval_id:
        params["approval_id"] = approval_id
    with (
        server(ctx) as client,
        client.request_stream(
            "GET", "/v1/files", params=params, read_seconds=approval_wait + ANSWER_MARGIN_SECONDS
        ) as response,
    ):
        if response.status_code == 202:
            response.read()
            _awaiting(response.json())
        if local == "-":
            for chunk in response.iter_bytes(CHUNK_BYTES):
                sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
            return
        size = _save(response.iter_bytes(CHUNK_BYTES), target)
    typer.echo(f"{remote} -> {target} ({size} bytes)")


def _save(chunks: Iterator[bytes], target: Path) -> int:
    """Into a temporary file beside `target`, renamed over it when complete."""
    directory = target.parent if str(target.parent) else Path(".")
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", dir=directory)
    except OSError as error:
        fail(f"cannot write into {directory}: {error.strerror}", EXIT_REFUSED)
    size = 0
    try:
        with os.fdopen(fd, "wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
                size += len(chunk)
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    return size


@files_cli.command("put")
def files_put(
    ctx: typer.Context,
    local: Path = typer.Argument(..., metavar="LOCAL"),
    remote: str = typer.Argument(..., metavar="REMOTE"),
    mode: str | None = typer.Option(
        None, "--mode", help="Octal permissions (0644); default: the replaced file's, or 0644."
    ),
    approval_wait: float = APPROVAL_WAIT,
    approval_id: str | None = APPROVAL_ID,
) -> None:
    """Upload LOCAL to REMOTE on the server (replaced whole and at once)."""
    try:
        handle = local.open("rb")
        size = os.fstat(handle.fileno()).st_size
    except OSError as error:
        fail(f"cannot read {local}: {error.strerror}", EXIT_REFUSED)
    digest = hashlib.sha256()

    def chunks() -> Iterator[bytes]:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
            yield chunk

    params: dict[str, str | int | float] = {"path": remote, "approval_wait": approval_wait}
    if mode is not None:
        params["mode"] = mode
    if approval_id:
        params["approval_id"] = approval_id
    with (
        handle,
        server(ctx) as client,
        client.request_stream(
            "PUT",
            "/v1/files",
            params=params,
            content=chunks(),
            headers={"Content-Length": str(size), "Content-Type": "application/octet-stream"},
            read_seconds=approval_wait + ANSWER_MARGIN_SECONDS,
        ) as response,
    ):
        response.read()
        record = response.json()
    if response.status_code == 202:
        _awaiting(record)
    if record.get("sha256") != digest.hexdigest():
        fail(
            f"{record.get('path')} was stored with sha256 {record.get('sha256')}, but "
            f"{local} has {digest.hexdigest()} (it changed while it was sent?)",
            EXIT_UNREACHABLE,
        )
    typer.echo(
        f"{local} -> {record.get('path')} ({record.get('size')} bytes, mode {record.get('mode')})"
    )
