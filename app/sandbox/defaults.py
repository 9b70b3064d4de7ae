"""The profile a command gets when neither the policy nor its session says otherwise: write the
workspace (and a private /tmp, which every sandbox has), see nothing of the server's own files
or of the credentials listed in `SHELLGATE_SANDBOX_HIDDEN`, and the network of
`SHELLGATE_SANDBOX_NETWORK` (`off` unless set)."""

from __future__ import annotations

from app.core.auth import GENERATED_TOKEN_FILE
from app.core.config import Settings
from app.sandbox.profile import SandboxProfile
from app.sandbox.program import settings_file


def server_paths(settings: Settings) -> tuple[str, ...]:
    """What belongs to the server and never to a command: the data dir (the database, every
    output log, the session snapshots, the generated token file), the policy file, and the
    `.env` settings file the server read at its start."""
    paths = [
        str(settings.data_dir),
        str(settings.data_dir / GENERATED_TOKEN_FILE),
        settings_file(),
    ]
    if settings.policy_file is not None:
        paths.append(str(settings.policy_file))
    return tuple(paths)


def default_profile(settings: Settings) -> SandboxProfile:
    hidden = dict.fromkeys((*server_paths(settings), *settings.sandbox_hidden))
    return SandboxProfile(
        network=settings.sandbox_network,
        write=(str(settings.workspace),),
        hidden=tuple(hidden),
    )
