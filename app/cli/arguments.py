"""Arguments the `shellgate` client commands share: a command given as several words (`run`,
`policy check`), `--env KEY=VALUE` pairs, and durations (`approve --for 1h`)."""

from __future__ import annotations

import re
from typing import Any

import typer
import typer.core


class CommandWords(typer.core.TyperCommand):
    """A command whose COMMAND... words may not start with `-` unless they follow `--`: say so
    when a word like `-la` is taken for an option of ours."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except Exception as error:
            # typer vendors its own click: recognise its NoSuchOption by name.
            if type(error).__name__ == "NoSuchOption":
                usage = f"{ctx.command_path} [OPTIONS] -- COMMAND..."
                hint = f"Words of the command that start with `-` go after `--`: {usage}"
                error.message = f"{getattr(error, 'message', error)}. {hint}"  # type: ignore[attr-defined]
            raise


def command_text(words: list[str]) -> str:
    """`shellgate run echo hi` runs `echo hi`: the words are joined with single spaces and the
    server's bash parses the result, as `ssh host echo hi` does. Quoting that must survive is
    the caller's (`shellgate run 'echo "a  b"'`)."""
    return " ".join(words)


def parse_env(pairs: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        key, separator, value = pair.partition("=")
        if not separator or not key:
            raise typer.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--env")
        env[key] = value
    return env


def sandbox_request(
    write: list[str], network: str | None, justification: str | None
) -> dict[str, Any] | None:
    """`run`'s sandbox options as the request's `sandbox` (None: nothing asked); `--sandbox-
    network` is `on`, `off`, or host globs separated by commas."""
    if not write and network is None and justification is None:
        return None
    request: dict[str, Any] = {"write": write}
    if network is not None:
        words = network.strip().lower()
        request["network"] = (
            words
            if words in ("on", "off")
            else [h.strip() for h in network.split(",") if h.strip()]
        )
    if justification is not None:
        request["justification"] = justification
    return request


_DURATION = re.compile(r"(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[smhd]?)")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str, *, option: str) -> float:
    """`90`, `90s`, `30m`, `1h`, `7d` → seconds; anything else is a usage error naming `option`.
    The server checks the bounds (SHELLGATE_REMEMBER_MIN/MAX_SECONDS) and says them."""
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None:
        raise typer.BadParameter(
            f"{text!r} is not a duration (like 90s, 30m, 1h or 7d)", param_hint=option
        )
    return float(match["number"]) * _UNIT_SECONDS[match["unit"]]
