"""The host's POSIX shell, for the few steps the server runs in front of a command (joining its
cgroups, a word on a channel) before it execs the next program.

Why not bash: these steps run once per command, and `/bin/sh` (dash on Debian and the slim
image) starts for a fraction of what bash costs (bench/PROFILE.md). Where /bin/sh is bash, a step
costs what bash costs; where there is none, `POSIX_SHELL` is None and the caller does without.
dash names only descriptors 0-9 in a redirection (`>&12` is a syntax error there), so a step
that writes to a descriptor is handed it at a single-digit number.
"""

from __future__ import annotations

import os
from typing import Final

SYSTEM_SHELL: Final = "/bin/sh"
POSIX_SHELL: Final = SYSTEM_SHELL if os.access(SYSTEM_SHELL, os.X_OK) else None
