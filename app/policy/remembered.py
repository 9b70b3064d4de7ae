"""Remembered decisions (docs/policy.md#remembered-decisions): an approver's "approve, and
don't ask again for `terraform plan *`", kept in the policy document as a scoped `allow` that
ends by itself.

A remembered rule only ever turns a `prompt` into an `allow` (governance applies it after the
policy's own verdict): a deny rule, a critical pattern, an unreadable command or a prompting
env name still win. Pure: no I/O happens here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from app.policy.shell.syntax import normalize_whitespace
from app.sandbox.policy_rules import SandboxWidening

__all__ = ["RememberedRule", "active_rules", "check_pattern", "suggest_pattern"]

# A word of a suggestion: a plain command or subcommand name (no quoting, globs or expansions,
# which a pattern would have to reproduce exactly).
_PLAIN_WORD = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:+@/=-]*$")


class RememberedRule(BaseModel):
    """One remembered `allow`: `match` (a rule glob) for `owner`'s calls (null: everyone's)
    until `expires_at`."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="`rr_…`: named in the record of every execution it allows.")
    match: str = Field(description="A rule glob, as in `rules` (`*` the only wildcard).")
    owner: str | None = Field(
        description="The token name whose calls it allows; null: everyone's (scope `all`)."
    )
    author: str = Field(description="The approver or admin who remembered it.")
    reason: str | None = Field(default=None, description="The decision's reason.")
    approval_id: str | None = Field(default=None, description="The approval it was decided on.")
    sandbox: SandboxWidening | None = Field(
        default=None,
        description="Remembered from a sandbox escalation: what the matching calls may also "
        "ask beyond their profile without a prompt (more `write`, more `network`).",
    )
    created_at: AwareDatetime
    expires_at: AwareDatetime

    @field_validator("match")
    @classmethod
    def _match_is_usable(cls, value: str) -> str:
        normalized = normalize_whitespace(value)
        problem = check_pattern(normalized)
        if problem is not None:
            raise ValueError(problem)
        return normalized

    def active(self, now: datetime) -> bool:
        return self.expires_at > now

    def applies_to(self, owner: str, now: datetime) -> bool:
        return self.active(now) and (self.owner is None or self.owner == owner)


def check_pattern(pattern: str) -> str | None:
    """Why `pattern` cannot be remembered (None: it can). Its first word must be literal, so
    that a remembered rule always names the program it lets run (`*` or `* --force` would let
    anything run)."""
    normalized = normalize_whitespace(pattern)
    if not normalized:
        return "the pattern must not be blank"
    first = normalized.split(" ", 1)[0]
    if "*" in first:
        return "the pattern's first word must be a literal command name (no `*`)"
    return None


def active_rules(
    rules: Sequence[RememberedRule], *, owner: str | None = None, now: datetime | None = None
) -> list[RememberedRule]:
    """The rules not yet expired (and, with `owner`, those that apply to that owner's calls)."""
    moment = now or datetime.now(UTC)
    if owner is None:
        return [rule for rule in rules if rule.active(moment)]
    return [rule for rule in rules if rule.applies_to(owner, moment)]


def suggest_pattern(segment: str) -> str:
    """The pattern offered for a prompted segment: its command word and subcommand, the rest as
    `*` (`terraform plan -out=x` → `terraform plan *`). A word that is not a plain name (an
    option, a quoted or globbed word) ends the literal part. A segment with nothing past those
    words is offered as it is, since `ls *` would not match `ls`."""
    words = normalize_whitespace(segment).split(" ")
    kept: list[str] = []
    for word in words[:2]:
        if (kept and word.startswith("-")) or not _PLAIN_WORD.match(word):
            break
        kept.append(word)
    if not kept:
        return normalize_whitespace(segment)
    if len(kept) == len(words):
        return " ".join(kept)
    return " ".join(kept) + " *"
