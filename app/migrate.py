"""Apply Alembic migrations programmatically (what `shellgate serve` does first)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

_HERE = Path(__file__).resolve().parent
# An installed wheel carries them as app/migrations; a checkout (editable install) keeps them
# in the repository's top-level migrations/.
_CANDIDATES = (_HERE / "migrations", _HERE.parent / "migrations")


def migrations_dir() -> Path:
    for candidate in _CANDIDATES:
        if (candidate / "env.py").is_file():
            return candidate
    raise FileNotFoundError(f"no Alembic migrations in {' or '.join(map(str, _CANDIDATES))}")


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade_to_head(database_url: str) -> None:
    command.upgrade(alembic_config(database_url), "head")
