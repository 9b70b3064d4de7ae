"""The server's own program: what it imports, runs and serves, never writable by a command.

Where the workspace holds the server's installation (`make run` in a checkout: the workspace is
the server's directory, its virtualenv inside), a sandboxed command could otherwise rewrite it,
and whatever it wrote would run as the server: a standby's first stage is a shell script of
this package run outside the sandbox at every spawn (app/process/standby_enter.sh), a module
not imported yet is imported at its first use, the migrations run at the next start, the
console's xterm.js runs in an approver's browser. bwrap binds each of these read-only over
the writable tree that holds it (app/sandbox/bwrap.py); outside one the host is read-only
already.

The settings file the server reads at its start (`.env` in its working directory) is hidden from
commands like the rest of its files; absent, a command in a workspace that holds it could make
one (`SHELLGATE_SANDBOX=off`) for the next start to read. So it is covered even then: bwrap
makes the empty file it mounts over, which stays, empty, in the host's tree.

`python -m app` puts its working directory first on `sys.path`, before the installed package:
an `app` package a command left there would be the program the next start runs, as the
server, outside any sandbox. Started that way from a directory commands can write (the
workspace, when `SHELLGATE_WORKSPACE` is not set), the server refuses to start
(`launch_directory`); `shellgate serve` and `python -P -m app` do not look there.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import app

# The package's own directory (scripts, the session wrapper, the console's pages included).
_APP = Path(app.__file__).resolve().parent
# A checkout keeps these beside the package: the Alembic scripts (an installed wheel carries
# them as app/migrations) and the console's npm packages.
_BESIDE = ("migrations", "node_modules")


@functools.cache
def program_paths() -> tuple[str, ...]:
    """The directories the server's code and assets come from, each as the kernel resolves
    it, those that exist: the package, the client package it installs beside it, the
    virtualenv and the interpreter's own prefix, the migrations and the console's npm
    packages of a checkout."""
    found = [str(_APP), *(str(_APP.parent / name) for name in _BESIDE)]
    try:
        client = importlib.util.find_spec("shellgate")
    except (ImportError, ValueError):  # a module of that name without a spec
        client = None
    if client is not None and client.submodule_search_locations:
        found += list(client.submodule_search_locations)
    found += [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix]
    if sys.executable:
        found.append(os.path.dirname(os.path.realpath(sys.executable)))
    # Only absolute names: an empty prefix (an embedding interpreter's) would resolve to the
    # working directory, the workspace itself perhaps, and make it read-only whole.
    real = {os.path.realpath(path) for path in found if os.path.isabs(path)}
    return tuple(sorted(path for path in real if os.path.isdir(path)))


def launch_directory() -> str | None:
    """The directory the next start of this server would import `app` from before the real
    one: its working directory, when it was started as `python -m app` without `-P` (or `-I`)
    and the package it runs is not that directory's own `app` (a checkout's, which is bound
    read-only like the rest of the program); None otherwise (`shellgate serve`)."""
    main = sys.modules.get("__main__")
    started_as = getattr(getattr(main, "__spec__", None), "name", None)
    if sys.flags.safe_path or started_as != "app.__main__":
        return None
    here = os.path.realpath(os.getcwd())
    return None if str(_APP) == os.path.join(here, "app") else here


def settings_file() -> str:
    """The `.env` the server reads its settings from (app/core/config.py): its working
    directory's."""
    return os.path.abspath(".env")


@dataclass(frozen=True)
class ServerFiles:
    """What the sandbox keeps from commands beyond the profile's hidden paths."""

    program: tuple[str, ...]  # bound read-only where a writable path holds them
    read_at_start: tuple[str, ...]  # covered even while absent, where a writable path holds them


@functools.cache
def server_files() -> ServerFiles:
    return ServerFiles(program_paths(), (os.path.realpath(settings_file()),))
