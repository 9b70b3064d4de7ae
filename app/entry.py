"""The `shellgate` program (and `python -m app`): a plain `serve` starts the server without
loading the Typer CLI (app/server/serve_command.py says why); everything else, `serve --help` and
any option `serve` does not take included, goes to the CLI (app/cli/main.py), which also owns the
usage errors."""

from __future__ import annotations

import sys

SERVE_OPTIONS = ("--host", "--port")


def plain_serve(args: list[str]) -> dict[str, str] | None:
    """`serve` with only `--host`/`--port` (as `--opt value` or `--opt=value`): the options;
    None for anything else."""
    if not args or args[0] != "serve":
        return None
    options: dict[str, str] = {}
    rest = args[1:]
    while rest:
        name, equals, value = rest[0].partition("=")
        if name not in SERVE_OPTIONS or name[2:] in options:
            return None
        if equals:
            rest = rest[1:]
        elif len(rest) >= 2:
            value, rest = rest[1], rest[2:]
        else:
            return None
        options[name[2:]] = value
    return options


def main() -> None:
    options = plain_serve(sys.argv[1:])
    port = options.get("port") if options is not None else None
    if options is not None and (port is None or port.isdigit()):
        from app.server.start_gc import defer_full_collections

        # Until the server listens (app/server/start_gc.py says why).
        defer_full_collections()
        from app.server.serve_command import serve

        serve(host=options.get("host"), port=int(port) if port is not None else None)
        return
    from app.cli.main import main as cli_main

    cli_main()
