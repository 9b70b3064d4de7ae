"""The approvals are built before the owners of their subjects, and each owner names its handler
as it is built: a subject named twice is a wiring fault at once, and approvals that some subject
has no handler for refuse to start (its decisions would otherwise be logged and dropped)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from app.approvals.service import ApprovalService
from app.store.db import Database, make_engine
from app.store.models import Approval


async def _nothing(approval: Approval) -> None:
    del approval


def _approvals(tmp_path: Path) -> ApprovalService:
    return ApprovalService(
        Database(make_engine(f"sqlite:///{tmp_path / 'x.db'}")), timeout_seconds=60
    )


def test_a_subject_given_two_handlers_is_refused(tmp_path: Path) -> None:
    approvals = _approvals(tmp_path)
    approvals.settles("session", _nothing)
    with pytest.raises(ValueError, match="session already have their handler"):
        approvals.settles("session", _nothing)


def test_approvals_missing_a_subjects_handler_do_not_start(tmp_path: Path) -> None:
    approvals = _approvals(tmp_path)
    approvals.settles("execution", _nothing)
    approvals.settles("file_operation", _nothing)
    with pytest.raises(RuntimeError, match=r"\['session'\]"):
        asyncio.run(approvals.restore())
