"""The profile one execution runs with, and what a request asks beyond it (docs/policy.md#sandbox).

    effective = the server's default profile
              + the policy's `sandbox` (its network replaces the default's when set; its write
                and hidden paths add to the default's)
              + the `sandbox` of the rule that decided the verdict (more write, more network)

Hidden only ever grows: nothing here removes a hidden path, and a write path at or below a
hidden one is refused before it gets here (hidden wins). Pure: no I/O but reading `$HOME`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from app.core.globs import compile_glob
from app.sandbox.policy_rules import WORKSPACE_VARIABLE, SandboxPolicy, SandboxWidening
from app.sandbox.profile import Network, SandboxProfile


def expand_path(path: str, *, workspace: str, home: str | None = None) -> str:
    """`$WORKSPACE` and `~` at the start of a checked path (policy_rules.check_path)."""
    if path == WORKSPACE_VARIABLE or path.startswith(WORKSPACE_VARIABLE + "/"):
        return workspace.rstrip("/") + path[len(WORKSPACE_VARIABLE) :] or "/"
    if path == "~" or path.startswith("~/"):
        base = home if home is not None else os.path.expanduser("~")
        return base.rstrip("/") + path[1:] or "/"
    return path


def expand_paths(paths: Iterable[str], *, workspace: str, home: str | None = None) -> list[str]:
    return [expand_path(path, workspace=workspace, home=home) for path in paths]


def covers(outer: str, path: str) -> bool:
    """`path` is `outer` or below it."""
    return outer == "/" or path == outer or path.startswith(outer.rstrip("/") + "/")


def under_hidden(paths: Iterable[str], hidden: Sequence[str]) -> list[str]:
    """The paths at or below a hidden one: they can never be made writable."""
    return [path for path in paths if any(covers(secret, path) for secret in hidden)]


def _unique(paths: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(paths))


def network_union(first: Network, second: Network | None) -> Network:
    """The wider of two network settings (`on` ⊃ a host list ⊃ `off`); two lists join."""
    if second is None or second == "off":
        return first
    if first == "on" or second == "on":
        return "on"
    if first == "off":
        return tuple(second)
    return _unique([*first, *second])


def network_beyond(profile: Network, asked: Network | None) -> Network | None:
    """What of `asked` the profile does not reach (None: nothing). A host glob is reached when
    one of the profile's globs matches it as text (`*.github.com` reaches `api.github.com`)."""
    if asked is None or asked == "off" or profile == "on":
        return None
    if asked == "on":
        return "on"
    if profile == "off":
        return tuple(asked)
    missing = tuple(glob for glob in asked if not any(compile_glob(have)(glob) for have in profile))
    return missing or None


def effective_profile(
    default: SandboxProfile,
    policy: SandboxPolicy,
    widening: SandboxWidening | None,
    *,
    workspace: str,
) -> SandboxProfile:
    """The profile the policy gives one execution (before any request of its own)."""
    network: Network = default.network
    if policy.network is not None:
        network = policy.network if isinstance(policy.network, str) else tuple(policy.network)
    write = [*default.write, *expand_paths(policy.write, workspace=workspace)]
    if widening is not None:
        network = network_union(
            network,
            None
            if widening.network is None
            else widening.network
            if isinstance(widening.network, str)
            else tuple(widening.network),
        )
        write += expand_paths(widening.write, workspace=workspace)
    hidden = _unique([*default.hidden, *expand_paths(policy.hidden, workspace=workspace)])
    # A policy path at or below a hidden one stays hidden: it is not offered as writable.
    writable = [path for path in _unique(write) if not under_hidden([path], hidden)]
    return SandboxProfile(network=network, write=tuple(writable), hidden=hidden)


@dataclass(frozen=True)
class SandboxAsk:
    """What a request asks beyond a profile: the write paths it does not cover and the network
    it does not reach (None: nothing more)."""

    write: tuple[str, ...] = ()
    network: Network | None = None

    def __bool__(self) -> bool:
        return bool(self.write) or self.network is not None

    def describe(self) -> str:
        """`write /srv/out, network on` — for reasons and messages."""
        parts = []
        if self.write:
            parts.append("write " + ", ".join(self.write))
        if self.network is not None:
            shown = self.network if isinstance(self.network, str) else ", ".join(self.network)
            parts.append(f"network {shown}")
        return "; ".join(parts)


def beyond(profile: SandboxProfile, write: Sequence[str], network: Network | None) -> SandboxAsk:
    """The part of a request (expanded, absolute write paths and a network) that `profile`
    does not already give."""
    missing = tuple(
        path for path in _unique(write) if not any(covers(have, path) for have in profile.write)
    )
    return SandboxAsk(write=missing, network=network_beyond(profile.network, network))


def granted(profile: SandboxProfile, ask: SandboxAsk) -> SandboxProfile:
    """`profile` widened by exactly what was asked beyond it: the one execution's escalation."""
    return replace(
        profile,
        write=_unique([*profile.write, *ask.write]),
        network=network_union(profile.network, ask.network),
        escalated=True,
    )
