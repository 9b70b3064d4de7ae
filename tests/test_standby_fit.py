"""Which spawns a standby waiting in the default sandbox may run, and the key its claim compares
(`Sandbox.standby_fit`, app/sandbox/boundary.py): worked out in one pass over where the
hidden paths lead now."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from app.core.config import Settings
from app.sandbox import Sandbox


def sandbox_in(tmp_path: Path) -> tuple[Sandbox, Path, Path]:
    workspace, secret = tmp_path / "ws", tmp_path / "ws" / "secret"
    (secret / "inside").mkdir(parents=True)
    settings = Settings(
        _env_file=None,
        workspace=workspace,
        data_dir=tmp_path / "data",
        sandbox_hidden=[str(secret)],
    )
    return Sandbox(settings), workspace, secret


def test_a_cwd_in_the_workspace_fits_with_the_key_a_claim_would_work_out(tmp_path: Path) -> None:
    sandbox, workspace, _ = sandbox_in(tmp_path)
    fit = sandbox.standby_fit(sandbox.default, str(workspace), extra=False)
    assert fit is not None
    assert fit() == sandbox.standby_key()


def test_a_cwd_under_a_hidden_path_or_outside_the_workspace_does_not_fit(tmp_path: Path) -> None:
    sandbox, _, secret = sandbox_in(tmp_path)
    assert sandbox.standby_fit(sandbox.default, str(secret / "inside"), extra=False) is None
    assert sandbox.standby_fit(sandbox.default, str(tmp_path), extra=False) is None
    assert sandbox.standby_fit(sandbox.default, str(tmp_path / "absent"), extra=False) is None


def test_another_profile_or_paths_to_bind_do_not_fit(tmp_path: Path) -> None:
    sandbox, workspace, _ = sandbox_in(tmp_path)
    wider = dataclasses.replace(sandbox.default, network="on")
    assert sandbox.standby_fit(wider, str(workspace), extra=False) is None
    assert sandbox.standby_fit(sandbox.default, str(workspace), extra=True) is None


def test_without_a_sandbox_any_spawn_fits_and_the_key_is_none(tmp_path: Path) -> None:
    sandbox, workspace, _ = sandbox_in(tmp_path)
    fit = sandbox.standby_fit(None, str(workspace), extra=False)
    assert fit is not None and fit() is None
