"""A network entry of a sandbox profile, `host[:port]` (docs/policy.md, "Host globs"): a host
name, an IPv4 address or a glob of them (`*` for any run of characters), and optionally a port
or `*`. Read in lower case; what the policy's `sandbox.network` and `SHELLGATE_SANDBOX_NETWORK`
accept alike."""

from __future__ import annotations

import re

_HOST_GLOB = re.compile(r"^[a-z0-9*][a-z0-9*.\-_]*(?::(?:[0-9]{1,5}|\*))?$")


def check_host_glob(glob: str) -> str:
    """One `host[:port]` glob, lower-cased; ValueError naming what is wrong."""
    text = glob.strip().lower()
    if not _HOST_GLOB.match(text):
        raise ValueError(
            f"network entry {glob!r} is not a host[:port] glob (letters, digits, `.`, `-`, "
            "`_` and `*`, then optionally `:` and a port or `*`)"
        )
    port = text.partition(":")[2]
    if port and port != "*" and not 1 <= int(port) <= 65535:
        raise ValueError(f"network entry {glob!r}: the port must be within 1..65535")
    return text
