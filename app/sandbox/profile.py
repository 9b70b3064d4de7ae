"""What one execution may do beyond reading the host: where it may write, what it must not
see, and where it may connect. Pure data: the kernel side builds it (app/sandbox/), the policy
and the approvals decide it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

# `on`: the host's network; `off`: a network namespace with loopback only; a tuple: `host[:port]`
# globs reached through the server's proxy, nothing else routed.
Network = Literal["on", "off"] | tuple[str, ...]


@dataclass(frozen=True)
class SandboxProfile:
    network: Network
    write: tuple[str, ...]  # absolute paths, writable with everything below them
    hidden: tuple[str, ...]  # absolute paths, absent for the command (hidden wins over writable)
    escalated: bool = False  # widened beyond the policy's profile by an approved request

    def to_record(self) -> dict[str, Any]:
        """The execution record's `sandbox` field: the profile the command ran with."""
        network = self.network if isinstance(self.network, str) else list(self.network)
        return {
            "network": network,
            "write": list(self.write),
            "hidden": list(self.hidden),
            "escalated": self.escalated,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> SandboxProfile:
        """The profile of a `to_record()` dict (a stored session's, a draft's)."""
        network = record.get("network", "off")
        return cls(
            network=network if isinstance(network, str) else tuple(network),  # type: ignore[arg-type]
            write=tuple(record.get("write") or ()),
            hidden=tuple(record.get("hidden") or ()),
            escalated=bool(record.get("escalated", False)),
        )
