"""The profile a command gets when neither the policy nor its session says otherwise: write the
workspace (and a private /tmp, which every sandbox has), see nothing of the server's own files
or of the credentials listed in `SHELLGATE_SANDBOX_HIDDEN`, and the network of
`SHELLGATE_SANDBOX_NETWORK` (`off` unless set)."""

from __future__ import annotations

import os

from sqlalchemy.engine import make_url

from app.core.auth import GENERATED_TOKEN_FILE
from app.core.config import Settings
from app.sandbox.profile import SandboxProfile
from app.sandbox.program import settings_file

# SQLite's files beside a database: its write-ahead log and shared memory, its rollback journal.
_SQLITE_SIDECARS = ("", "-wal", "-shm", "-journal")


def server_paths(settings: Settings) -> tuple[str, ...]:
    """What belongs to the server and never to a command: the data dir (the database, every
    output log, the session snapshots, the generated token file), a SQLite database kept
    elsewhere (`SHELLGATE_DATABASE_URL`) with its journals, the policy file, the CA bundle
    the deliveries trust, and the `.env` settings file the server read at its start."""
    paths = [
        str(settings.data_dir),
        str(settings.data_dir / GENERATED_TOKEN_FILE),
        settings_file(),
    ]
    database = sqlite_file(settings.resolved_database_url)
    data_dir = os.path.abspath(settings.data_dir)
    if database is not None and not database.startswith(data_dir.rstrip("/") + "/"):
        paths += [database + sidecar for sidecar in _SQLITE_SIDECARS]
    if settings.policy_file is not None:
        paths.append(str(settings.policy_file))
    if settings.notify_ca_file is not None:
        # Read at each delivery: a command that wrote it would pick whom the server trusts.
        paths.append(str(settings.notify_ca_file))
    return tuple(paths)


def sqlite_file(url: str) -> str | None:
    """The file of a SQLite URL (`sqlite:///path`, `sqlite+pysqlite:////abs`), absolute; None
    for another database or an in-memory one. A command that could write it would write the
    registry itself: the policy's versions, the approvals and their decisions."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return os.path.abspath(parsed.database)


def default_profile(settings: Settings) -> SandboxProfile:
    hidden = dict.fromkeys((*server_paths(settings), *settings.sandbox_hidden))
    return SandboxProfile(
        network=settings.sandbox_network,
        write=(str(settings.workspace),),
        hidden=tuple(hidden),
    )
