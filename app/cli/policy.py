"""`shellgate policy show|set|check`: the policy in force, replacing it (admin), and the dry
run, which exits with the verdict so that a script can branch on it without parsing text."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from app.cli.arguments import CommandWords, command_text, parse_env
from app.cli.connection import EXIT_REFUSED, fail, server
from app.governance.service import PolicyFileError, read_policy_file

VERDICT_EXIT_CODES = {"allow": 0, "prompt": 10, "deny": 11}

policy_cli = typer.Typer(help="Show, replace or dry-run the policy.", no_args_is_help=True)


@policy_cli.command("show")
def policy_show(ctx: typer.Context) -> None:
    """Print the policy in force (JSON)."""
    with server(ctx) as client:
        document = client.get_policy()
    typer.echo(json.dumps(document, indent=2))


@policy_cli.command("set")
def policy_set(
    ctx: typer.Context,
    file: Path = typer.Argument(..., help="YAML or JSON, the shape of `policy show`."),
) -> None:
    """Replace the policy (admin token)."""
    try:
        document = read_policy_file(file)
    except PolicyFileError as error:
        fail(str(error), EXIT_REFUSED)
    with server(ctx) as client:
        stored = client.put_policy(document.model_dump(mode="json"))
    rules = len(stored.get("rules") or [])
    typer.echo(f"policy replaced: {rules} rules, default {stored.get('default')}")


@policy_cli.command("check", cls=CommandWords)
def policy_check(
    ctx: typer.Context,
    words: list[str] = typer.Argument(
        ...,
        metavar="COMMAND...",
        help="The command as an agent would send it; several words are joined with spaces, as "
        "`run` does (`--` before words that start with `-`).",
    ),
    env: list[str] = typer.Option([], "--env", help="KEY=VALUE, repeatable: judged too."),
    cwd: str | None = typer.Option(None, "--cwd", help="The working directory it would run in."),
    as_json: bool = typer.Option(False, "--json", help="Print the whole evaluation."),
) -> None:
    """Dry run: what the policy would decide for COMMAND with its env (runs nothing).

    Exits with the verdict: 0 allow, 10 prompt, 11 deny."""
    with server(ctx) as client:
        evaluation = client.evaluate(command_text(words), env=parse_env(env) or None, cwd=cwd)
    verdict = evaluation.verdict
    if as_json:
        typer.echo(evaluation.model_dump_json(indent=2))
    else:
        typer.echo(f"verdict: {verdict}")
        typer.echo(f"reason: {evaluation.reason}")
        for item in evaluation.env:
            if item.verdict != "allow":
                typer.echo(f"env {item.name}: {item.verdict} ({item.rule})")
    # Fail closed: a verdict this client does not know is treated as deny.
    raise typer.Exit(VERDICT_EXIT_CODES.get(str(verdict), VERDICT_EXIT_CODES["deny"]))
