"""What the sandbox hides as the server's own whatever `SHELLGATE_SANDBOX_HIDDEN` says
(app/sandbox/defaults.py): besides the data dir, the policy file and `.env`, every file the
server reads at its work that a setting may put in the workspace."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.config import Settings
from app.sandbox.defaults import server_paths, sqlite_file


def settings(tmp_path: Path, **values: object) -> Settings:
    return Settings(  # type: ignore[call-arg]
        _env_file=None, data_dir=tmp_path / "data", workspace=tmp_path, **values
    )


def test_a_sqlite_registry_outside_the_data_dir_and_its_journals(tmp_path: Path) -> None:
    registry = tmp_path / "registry.db"
    paths = server_paths(settings(tmp_path, database_url=f"sqlite:///{registry}"))
    for suffix in ("", "-wal", "-shm", "-journal"):
        assert f"{registry}{suffix}" in paths


def test_the_default_registry_adds_nothing_the_data_dir_does_not_cover(tmp_path: Path) -> None:
    paths = server_paths(settings(tmp_path))
    assert not [path for path in paths if path.endswith(".db") or path.endswith("-wal")]


def test_the_deliveries_ca_bundle(tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    assert str(bundle) in server_paths(settings(tmp_path, notify_ca_file=bundle))


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:////srv/registry.db", "/srv/registry.db"),
        ("sqlite+pysqlite:////srv/registry.db?mode=rwc", "/srv/registry.db"),
        ("sqlite://", None),
        ("sqlite:///:memory:", None),
        ("postgresql://shellgate@db/shellgate", None),
    ],
)
def test_the_file_of_a_sqlite_url(url: str, expected: str | None) -> None:
    assert sqlite_file(url) == expected
