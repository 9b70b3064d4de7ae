"""The notices on a command the sandbox refused something: the error text a refused write or a
hidden path leaves (EROFS, EACCES) and the profile that refused it, or the hosts its host
list's proxy refused, so the caller knows to ask for more (docs/sandbox.md) rather than
retry."""

from __future__ import annotations

import json
from collections.abc import Sequence

from app.sandbox.hidden import HiddenPaths
from app.sandbox.profile import SandboxProfile
from app.sandbox.program import server_files

# What the C library and the common tools print for EROFS and EACCES.
REFUSAL_MARKS = ("Read-only file system", "Permission denied")


def refusal_notice(profile: SandboxProfile, output: str) -> str | None:
    """The notice for a failed command's output, or None when nothing in it looks refused."""
    if not any(mark in output for mark in REFUSAL_MARKS):
        return None
    network = profile.network if isinstance(profile.network, str) else ", ".join(profile.network)
    writable = ", ".join([*profile.write, "/tmp (private)"])
    trees = HiddenPaths(profile.write)  # (a set of trees: whatever lies under one)
    held = [path for path in server_files().program if trees.covering(path) is not None]
    # No request can widen these (app/sandbox/program.py): say so, or the caller would ask.
    program = (
        f", the server's own program in it read-only whatever is asked ({', '.join(held)})"
        if held
        else ""
    )
    return (
        "the command may have failed on a sandbox refusal: it ran with the profile "
        f"write [{writable}]{program}, network {network}, and everything else read-only or "
        "hidden (docs/sandbox.md); ask for more with the request's `sandbox` rather than retry"
    )


def egress_refusal_notice(refused: Sequence[str], hosts: Sequence[str]) -> str:
    """The notice on a command whose host list's proxy refused `refused` (`host:port`s): what
    to ask for, word for word, so that a model retrying asks a person instead of looping."""
    return (
        f"the sandbox's proxy refused {', '.join(refused)}: the command's network is the "
        f"host list [{', '.join(hosts)}] (docs/sandbox.md); ask for more with the request's "
        f"`sandbox` ({json.dumps({'network': list(refused)})}) rather than retry"
    )
