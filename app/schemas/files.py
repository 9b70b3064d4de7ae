"""Wire shapes of the files API (docs/api.md#files)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from app.policy.file_rules import FileRule

FileOperationState = Literal[
    "awaiting_approval", "approved", "running", "completed", "failed", "denied", "rejected"
]


class FileOperationPublic(BaseModel):
    """One recorded read, write or stat."""

    id: str
    owner: str
    op: Literal["read", "write", "stat"]
    path: str = Field(
        description="The absolute path as requested (relative paths join the workspace)."
    )
    resolved_path: str = Field(
        description="The path with its symlinks followed: what was read or written."
    )
    size: int | None = Field(description="Bytes read or written (for a read: the file's size).")
    mode: str | None = Field(description="The mode a write set, in octal.")
    sha256: str | None = Field(description="The sha256 of what a write stored.")
    verdict: Literal["allow", "prompt", "deny"]
    reason: str
    state: FileOperationState
    message: str | None = Field(description="Why it failed or was refused.")
    approval_id: str | None
    execution_id: str | None = Field(
        description="Always null: an operation's approval names the operation itself "
        "(`file_operation_id`), no execution. Kept for clients of earlier versions, which "
        "gave a prompted operation an execution record as the approval's anchor."
    )
    created_at: datetime
    finished_at: datetime | None


class FileOperationsPublic(BaseModel):
    data: list[FileOperationPublic]


class FileStatPublic(BaseModel):
    path: str
    resolved_path: str
    type: Literal["file", "directory", "other"]
    size: int
    mode: str = Field(description="Permission bits in octal, e.g. `0644`.")
    mtime: datetime
    symlink: bool = Field(description="`path` itself is a symbolic link.")
    sha256: str | None = Field(description="Only with `sha256=true`, and only for a file.")


class FileCheckPublic(BaseModel):
    """What the policy's `files` rules would decide for an operation (the dry run)."""

    verdict: Literal["allow", "prompt", "deny"]
    reason: str
    rule: FileRule | None = Field(description="The rule that decided; null: a default did.")
    path: str = Field(description="The path as written, made absolute.")
    resolved_path: str = Field(description="The path with its symlinks followed.")
    judged_path: str = Field(description="The one of the two the verdict rests on.")
