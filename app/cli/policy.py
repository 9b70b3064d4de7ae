"""`shellgate policy show|set|check|replay`: the policy in force, replacing it (admin), the dry
run, which exits with the verdict so that a script can branch on it without parsing text, and
a draft replayed against past approvals, which exits 12 when it would overrule a human."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from app.cli.arguments import CommandWords, command_text, parse_env
from app.cli.connection import EXIT_REFUSED, fail, server
from app.governance.service import PolicyFileError, read_policy_file

VERDICT_EXIT_CODES = {"allow": 0, "prompt": 10, "deny": 11}
# After the verdicts: a draft that would decide a past call against its human.
EXIT_DRAFT_DISAGREES = 12

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


@policy_cli.command("replay")
def policy_replay(
    ctx: typer.Context,
    file: Path = typer.Argument(..., help="The draft: YAML or JSON, the shape of `policy show`."),
    limit: int | None = typer.Option(
        None, "--limit", min=1, max=500, help="At most this many past approvals (default 100)."
    ),
    since: str | None = typer.Option(
        None, "--since", help="Only approvals created at or after this ISO 8601 time."
    ),
    show_all: bool = typer.Option(False, "--all", help="List every call, not only disagreements."),
    as_json: bool = typer.Option(False, "--json", help="Print the server's whole answer."),
) -> None:
    """What a draft policy would have decided for the calls humans were asked about, beside
    what they decided (approver or admin token; changes nothing).

    Exits 0 when the draft agrees with every decision it would make, 12 when it would decide
    at least one call against a human (allow what was denied, deny what was approved)."""
    try:
        document = read_policy_file(file)
    except PolicyFileError as error:
        fail(str(error), EXIT_REFUSED)
    with server(ctx) as client:
        replay = client.replay_policy(document.model_dump(mode="json"), limit=limit, since=since)
    against = replay.disagreements
    if as_json:
        typer.echo(replay.model_dump_json(indent=2))
    else:
        agreeing = sum(1 for item in replay.data if item.agrees is True)
        open_ = len(replay.data) - agreeing - len(against)
        typer.echo(
            f"{len(replay.data)} past calls: {agreeing} agree, {len(against)} against the human, "
            f"{open_} would still ask or were not decided; {replay.skipped} file/sandbox "
            "approvals skipped"
        )
        for item in replay.data if show_all else against:
            mark = {True: "agrees", False: "AGAINST", None: "open"}[item.agrees]
            who = item.decided_by or "nobody"
            typer.echo(
                f"{mark:7}  {item.human} by {who} -> draft {item.draft_verdict}: {item.command}"
                f"  [{item.approval_id}; {item.draft_reason}]"
            )
    raise typer.Exit(EXIT_DRAFT_DISAGREES if against else 0)
