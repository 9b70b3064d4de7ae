"""A sandbox whose network is a host list (docs/sandbox.md, "Network"): what the command runs
behind and what its environment says, around the server's proxy (app/sandbox/egress.py).

The sandbox keeps its own network namespace, loopback only, as with `off`: nothing is routed.
The server's proxy listens on a Unix socket of the execution's own, bound into the sandbox's
private `/tmp`; a relay (app/sandbox/egress_relay.py) listens on the sandbox's loopback at
`EGRESS_PORT` and hands each connection to that socket; `HTTP_PROXY` and `HTTPS_PROXY` point at
the relay. What the proxy refuses, and anything that does not go through a proxy, fails closed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Final

from app.sandbox.profile import SandboxProfile

# Inside the sandbox: the proxy's socket (the private /tmp is a tmpfs, so its mount point can
# be made there) and the relay's port on the sandbox's own loopback (squid's, as proxies go).
EGRESS_SOCKET: Final = "/tmp/.shellgate-egress.sock"
EGRESS_PORT: Final = 3128
EGRESS_URL: Final = f"http://127.0.0.1:{EGRESS_PORT}"
_RELAY_SOURCE: Final = (Path(__file__).parent / "egress_relay.py").read_text(encoding="utf-8")
_INTERPRETER: Final = os.path.realpath(sys.executable)


def hosts_of(profile: SandboxProfile | None) -> tuple[str, ...] | None:
    """The profile's host list; None when its network is `on` or `off` (or there is none)."""
    if profile is None or isinstance(profile.network, str):
        return None
    return tuple(profile.network)


def relay_argv() -> list[str]:
    """What runs first inside the sandbox, the command's argv after it. The server's own
    interpreter (the sandbox shows the host read-only), isolated from every site directory; by
    its real path, for a virtualenv's link may sit where the sandbox shows nothing (the host's
    `/tmp`), and the relay needs the standard library alone. The relay's source as text, for
    the server's source tree may be out of the sandbox's sight too."""
    return [_INTERPRETER, "-I", "-S", "-c", _RELAY_SOURCE, EGRESS_SOCKET, str(EGRESS_PORT)]


def proxy_environment() -> dict[str, str]:
    """The variables that send HTTP clients (curl, pip, npm, git, Python's urllib) through the
    relay. Loopback itself is the sandbox's own (a server the command starts): never proxied."""
    return {
        "HTTP_PROXY": EGRESS_URL,
        "HTTPS_PROXY": EGRESS_URL,
        "http_proxy": EGRESS_URL,
        "https_proxy": EGRESS_URL,
        "NO_PROXY": "localhost,127.0.0.1,::1",
        "no_proxy": "localhost,127.0.0.1,::1",
    }
