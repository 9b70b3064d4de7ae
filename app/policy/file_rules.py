"""The policy's `files` rules (docs/policy.md#files), pure: path globs → allow / prompt / deny,
per access (read or write), and the defaults inside and outside the workspace.

Every path a request leads to is judged, the path as written (made absolute) and the path with
its symlinks followed, and the stricter verdict wins: a link inside the workspace that points
outside is judged as outside. A hard link has no "followed" path: a regular file with more
than one link is also judged as strictly as any of its other names could be
(`judge_other_names`), since no path lookup finds them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from app.core.globs import compile_glob

FileAccess = Literal["read", "write"]
_SEVERITY = {"allow": 0, "prompt": 1, "deny": 2}


def _normalize(value: Any) -> Any:
    # Read like the command rules' approvals: trimmed and in any case.
    return value.strip().lower() if isinstance(value, str) else value


FileApproval = Annotated[Literal["allow", "prompt", "deny"], BeforeValidator(_normalize)]
FileRuleAccess = Annotated[Literal["read", "write", "any"], BeforeValidator(_normalize)]


class FileRule(BaseModel):
    """`{match, approval, access}`: `match` is a `*` glob over an absolute path (`*` crosses
    `/`); `access` says which operations it covers (`stat` is a read)."""

    model_config = ConfigDict(extra="forbid")

    match: str
    approval: FileApproval
    access: FileRuleAccess = "any"

    @field_validator("match")
    @classmethod
    def _absolute_glob(cls, value: str) -> str:
        if not value.startswith("/") and not value.startswith("*"):
            raise ValueError("match must be an absolute path glob (start with / or *)")
        return value


class FileRules(BaseModel):
    model_config = ConfigDict(extra="forbid")

    workspace: FileApproval = "allow"
    outside: FileApproval = "prompt"
    rules: list[FileRule] = Field(default_factory=list)


@dataclass(frozen=True, slots=True)
class FileVerdict:
    approval: Literal["allow", "prompt", "deny"]
    reason: str
    rule: FileRule | None
    # The path the verdict was decided on (the written one or the resolved one).
    path: str


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _judge_one(
    rules: FileRules, access: FileAccess, path: str, roots: tuple[str, ...]
) -> FileVerdict:
    for rule in rules.rules:
        if rule.access in (access, "any") and compile_glob(rule.match)(path):
            return FileVerdict(
                rule.approval, f"{access} of {path}: file rule {rule.match}", rule, path
            )
    if any(_inside(path, root) for root in roots):
        return FileVerdict(rules.workspace, f"{access} of {path}: inside the workspace", None, path)
    return FileVerdict(rules.outside, f"{access} of {path}: outside the workspace", None, path)


def judge_file(
    rules: FileRules, access: FileAccess, paths: tuple[str, ...], workspace_roots: tuple[str, ...]
) -> FileVerdict:
    """The first rule (in order) that covers `access` and matches decides for a path, else the
    workspace default; over all `paths`, the strictest verdict wins (the first on a tie)."""
    verdicts = [_judge_one(rules, access, path, workspace_roots) for path in dict.fromkeys(paths)]
    return max(verdicts, key=lambda verdict: _SEVERITY[verdict.approval])


def stricter(first: FileVerdict, second: FileVerdict | None) -> FileVerdict:
    """The stricter of two verdicts (the first on a tie, or when there is no second)."""
    if second is not None and outranks(second.approval, first.approval):
        return second
    return first


def outranks(approval: str, other: str) -> bool:
    """Whether `approval` is stricter than `other` (deny > prompt > allow)."""
    return _SEVERITY[approval] > _SEVERITY[other]


def judge_other_names(
    rules: FileRules, access: FileAccess, path: str, links: int
) -> FileVerdict | None:
    """The verdict the other names of a regular file with `links` hard links could get, or
    None when it has no other name or none of them could be judged more than `allow`.

    The kernel keeps no list of a file's names: finding them means walking every directory of
    its file system. So each of them may be any path: every rule covering `access` could match
    one (its glob is not tried), and `workspace` or `outside` could decide for one that no rule
    matches. The strictest of those is this verdict; its reason names the rule or the default
    it stands for."""
    if links <= 1:
        return None
    candidates: list[tuple[FileApproval, str, FileRule | None]] = [
        (rule.approval, f"file rule {rule.match}", rule)
        for rule in rules.rules
        if rule.access in (access, "any")
    ]
    candidates.append((rules.workspace, "the workspace default", None))
    candidates.append((rules.outside, "the outside-the-workspace default", None))
    approval, source, rule = max(candidates, key=lambda candidate: _SEVERITY[candidate[0]])
    if approval == "allow":
        return None
    return FileVerdict(
        approval,
        f"{access} of {path}: the file has {links} hard links and its other names cannot be "
        f"found from this one, so it is judged as strictly as any of them could be "
        f"({approval} by {source}; docs/policy.md#hard-links)",
        rule,
        path,
    )
