"""The server's own profile, before the policy says anything (docs/sandbox.md).

Stopgap until the kernel side lands: the same shape (the workspace writable; the data
directory and the policy file hidden), without the private /tmp and the configurable list.
"""

from __future__ import annotations

from app.core.config import Settings
from app.sandbox.profile import SandboxProfile


def default_profile(settings: Settings) -> SandboxProfile:
    hidden = [str(settings.data_dir)]
    if settings.policy_file is not None:
        hidden.append(str(settings.policy_file))
    return SandboxProfile(network="on", write=(str(settings.workspace),), hidden=tuple(hidden))
