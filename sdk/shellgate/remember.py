"""`Remember`: the "approve and remember" choice sent with an approval (docs/policy.md,
Remembered decisions) — calls like the approved one then run without a prompt for a while."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Remember:
    """`pattern`: a rule glob covering the approved command (None: the approval's
    `suggested_pattern`); `scope`: `owner` (the requester's calls) or `all` (everyone's, admin
    tokens only); `for_seconds`: how long, within the server's bounds."""

    pattern: str | None = None
    scope: Literal["owner", "all"] = "owner"
    for_seconds: float = 3600

    def to_json(self) -> dict[str, object]:
        body: dict[str, object] = {"scope": self.scope, "for_seconds": self.for_seconds}
        if self.pattern is not None:
            body["pattern"] = self.pattern
        return body


__all__ = ["Remember"]
