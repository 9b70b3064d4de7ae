"""How the `shellgate` client commands reach a server: the connection options, the token
(first of `--token`, `SHELLGATE_TOKEN`, the generated admin token file) and one client whose
errors become one line and an exit status."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import typer
from pydantic import ValidationError

from app.core.auth import GENERATED_TOKEN_FILE
from app.core.config import Settings
from app.core.visible_text import visible
from shellgate import ApiError, Client, ServerUnreachableError, ShellgateError

EXIT_NOT_FINISHED = 1
EXIT_REFUSED = 2
EXIT_UNREACHABLE = 3


@dataclass(frozen=True)
class ConnectionOptions:
    url: str
    token: str | None
    token_source: str | None  # "--token" or "SHELLGATE_TOKEN"; None: look for the token file
    verbose: bool


@dataclass(frozen=True)
class ResolvedToken:
    value: str | None
    file: Path | None  # set when the token was read from the generated token file


def _execution_id(value: str) -> str:
    """An execution's result text points at its log as `artifact://<id>`: take that as the id."""
    return value.removeprefix("artifact://")


def execution_id_argument() -> Any:
    """The ID argument of the commands that name one execution (ex_… or artifact://ex_…)."""
    return typer.Argument(
        ...,
        metavar="ID",
        help="The execution id (ex_…, or artifact://ex_…).",
        callback=_execution_id,
    )


def fail(message: str, status: int) -> NoReturn:
    # A message quotes the server's text (a path, a cwd, a command's error): its control
    # characters are shown as escapes, never sent to the user's terminal.
    typer.echo(f"shellgate: {visible(message)}", err=True)
    raise typer.Exit(status)


def generated_token_path() -> Path:
    try:
        data_dir = Settings().data_dir
    except ValidationError:
        data_dir = Path("./data")
    return data_dir / GENERATED_TOKEN_FILE


def resolve_token(options: ConnectionOptions) -> ResolvedToken:
    """The first of: --token, SHELLGATE_TOKEN, the generated admin token file."""
    if options.token is not None:
        if options.verbose:
            typer.echo(f"shellgate: token from {options.token_source}", err=True)
        return ResolvedToken(options.token, None)
    path = generated_token_path()
    try:
        token = path.read_text(encoding="utf-8").strip() or None
    except OSError:
        token = None
    if options.verbose:
        found = f"token from {path}" if token else f"no token (--token, SHELLGATE_TOKEN, {path})"
        typer.echo(f"shellgate: {found}", err=True)
    return ResolvedToken(token, path if token else None)


@contextlib.contextmanager
def server(ctx: typer.Context) -> Iterator[Client]:
    """A client for the command's server; turns every server or network error into one line."""
    options: ConnectionOptions = ctx.ensure_object(ConnectionOptions)
    if not options.url.startswith(("http://", "https://")):
        # A usage error, not an unreachable server: without a scheme nothing is ever tried.
        fail(
            f"--url (SHELLGATE_URL) must start with http:// or https://, got {options.url!r}",
            EXIT_REFUSED,
        )
    token = resolve_token(options)
    try:
        with Client(options.url, token.value) as client:
            yield client
    except ServerUnreachableError as error:
        fail(str(error), EXIT_UNREACHABLE)
    except ApiError as error:
        if error.status == 401 and token.file is not None:
            # A file left by an earlier server (e.g. before SHELLGATE_TOKENS was set) is the
            # usual cause: name it rather than print a bare 401.
            fail(
                f"the token in {token.file} is not accepted by {options.url}: it is stale"
                " — set SHELLGATE_TOKEN or --token",
                EXIT_REFUSED,
            )
        if error.status == 401 and token.value is None:
            # Run away from the server's directory, the generated token file is not found
            # (./data is relative): say where it was looked for instead of a bare 401.
            fail(
                f"no token: none given (--token, SHELLGATE_TOKEN) and no generated one at "
                f"{generated_token_path().resolve()} — run from the server's directory, set "
                "SHELLGATE_DATA_DIR to its data directory, or pass a token",
                EXIT_REFUSED,
            )
        status = EXIT_REFUSED if error.status < 500 else EXIT_UNREACHABLE
        fail(f"{error.message} ({error.code}, HTTP {error.status})", status)
    except ShellgateError as error:  # any other SDK failure: still one line, no traceback
        fail(str(error), EXIT_UNREACHABLE)
