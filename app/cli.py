"""`shellgate` command line: serve the API, export the OpenAPI document."""

from __future__ import annotations

import json
import logging
import sys

import typer
import uvicorn
from pydantic import ValidationError

from app.config import Settings
from app.policy_service import PolicyFileError, read_policy_file

cli = typer.Typer(
    help="shellgate: run bash commands for remote agents, safely.", no_args_is_help=True
)


@cli.command()
def serve(
    host: str | None = typer.Option(None, help="Overrides SHELLGATE_HOST."),
    port: int | None = typer.Option(None, help="Overrides SHELLGATE_PORT."),
) -> None:
    """Apply migrations and serve the API (uvicorn)."""
    overrides: dict[str, object] = {}
    if host is not None:
        overrides["host"] = host
    if port is not None:
        overrides["port"] = port
    try:
        settings = Settings(**overrides)  # type: ignore[arg-type]
        if settings.policy_file is not None:
            # Fail before uvicorn starts, with the file's problem and no traceback.
            read_policy_file(settings.policy_file)
    except (ValidationError, PolicyFileError) as error:
        typer.echo(f"shellgate: {error}", err=True)
        raise typer.Exit(2) from None
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from app.main import create_app

    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        proxy_headers=True,
        forwarded_allow_ips=settings.forwarded_allow_ips,
        ws_ping_interval=settings.ws_ping_seconds,
        ws_ping_timeout=settings.ws_ping_seconds,
        ws_per_message_deflate=settings.ws_compression,
    )


@cli.command()
def openapi() -> None:
    """Print the OpenAPI document (what `openapi.json` at the repo root holds)."""
    from app.openapi_export import openapi_document

    sys.stdout.write(json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n")


def main() -> None:
    cli()
