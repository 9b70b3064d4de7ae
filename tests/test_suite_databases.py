"""The suite's PostgreSQL half is skipped locally, with the reason, when no PostgreSQL answers;
with CI=true the run stops before its first test instead; `.ci/run`'s check says the same."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text

from tests.conftest import free_port
from tests.databases import POSTGRES_URL, PostgresDatabases, process_alive

ROOT = Path(__file__).resolve().parent.parent


def _nobody_listening_url() -> str:
    return f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/test"


def _run(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items() if key != "CI"}
    environment.update(env)
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _pytest(url: str, *extra: str, **env: str) -> subprocess.CompletedProcess[str]:
    return _run(
        ["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_migrations.py", *extra],
        SHELLGATE_TEST_POSTGRES_URL=url,
        **env,
    )


def test_locally_the_postgres_half_is_skipped_with_the_reason() -> None:
    url = _nobody_listening_url()
    run = _pytest(url, "-rs")
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"\b\d+ passed, 1 skipped\b", run.stdout), run.stdout
    assert f"no PostgreSQL at {url}" in run.stdout
    assert "point SHELLGATE_TEST_POSTGRES_URL at" in run.stdout


def test_in_ci_a_missing_postgres_stops_the_run_before_any_test() -> None:
    run = _pytest(_nobody_listening_url(), CI="true")
    assert run.returncode == 3, run.stdout + run.stderr  # pytest.exit's code in conftest
    assert "CI=true needs PostgreSQL" in run.stdout + run.stderr
    assert "passed" not in run.stdout


def test_in_ci_the_sqlite_half_alone_runs_when_asked_for_explicitly() -> None:
    run = _pytest(_nobody_listening_url(), "-m", "not postgres", CI="true")
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"\b\d+ passed, 1 deselected\b", run.stdout), run.stdout


def test_the_ci_check_fails_without_postgres_and_passes_with_it() -> None:
    url = _nobody_listening_url()
    missing = _run(["-m", "tests.databases"], SHELLGATE_TEST_POSTGRES_URL=url)
    assert missing.returncode == 1
    assert f"no PostgreSQL at {url}" in missing.stdout
    reachable = _run(["-m", "tests.databases"])
    if reachable.returncode != 0:
        pytest.skip(reachable.stdout.strip())
    assert "answers" in reachable.stdout


def _database_names(engine: Engine) -> set[str]:
    with engine.connect() as connection:
        return set(connection.execute(text("SELECT datname FROM pg_database")).scalars())


def test_a_killed_runs_databases_are_dropped_and_nothing_else(
    postgres_databases: PostgresDatabases,
) -> None:
    finished = subprocess.Popen(["true"])
    finished.wait()
    dead = finished.pid
    if process_alive(dead):
        pytest.skip(f"pid {dead} was reused already")
    orphans = {f"shellgate_test_{dead}_a1b2c3_template", f"shellgate_test_{dead}_a1b2c3_7"}
    kept = {
        f"shellgate_test_{os.getpid()}_a1b2c3_7",  # a run still going (this one)
        f"shellgate_test_{dead}_a1b2c3_7_copy",  # not a name the suite makes
        f"shellgate_testing_{dead}_a1b2c3_7",
        f"mine_{dead}_a1b2c3_7",
    }
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            for name in orphans | kept:
                connection.execute(text(f'CREATE DATABASE "{name}"'))
        dropped = postgres_databases.drop_orphans()
        left = _database_names(admin)
        assert not orphans & left
        assert kept <= left
        assert not kept & set(dropped)
    finally:
        with admin.connect() as connection:
            for name in orphans | kept:
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
