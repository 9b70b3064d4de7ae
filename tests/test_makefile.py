"""`make run` installs what serving needs, no more: the client (sdk/) and the runtime
dependencies, plus the PostgreSQL driver when the database URL names PostgreSQL; `make test`
installs [dev]. `make run`'s commands work in a directory of their own, not in the checkout."""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def planned(target: str, *make_arguments: str, **env: str) -> str:
    """The commands make would run for `target` if pyproject.toml had just changed."""
    environment = {key: value for key, value in os.environ.items() if key != "MAKEFLAGS"}
    environment.pop("SHELLGATE_DATABASE_URL", None)
    environment.pop("SHELLGATE_WORKSPACE", None)
    environment.update(env)
    result = subprocess.run(
        ["make", "--dry-run", "--what-if=pyproject.toml", target, *make_arguments],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout


@pytest.mark.parametrize(
    ("database_url", "install"),
    [
        ("", "pip install -q -c constraints.txt -e ./sdk -e '.'"),
        (
            "postgresql+psycopg://app@db/shellgate",
            "pip install -q -c constraints.txt -e ./sdk -e '.[postgres]'",
        ),
    ],
)
def test_make_run_installs_the_runtime_dependencies_only(database_url: str, install: str) -> None:
    plan = planned("run", SHELLGATE_DATABASE_URL=database_url)
    assert install in plan
    assert "[dev]" not in plan


def test_make_test_installs_the_dev_extra() -> None:
    assert "pip install -q -c constraints.txt -e ./sdk -e '.[dev]'" in planned("test")


@pytest.mark.parametrize(
    ("line", "install"),
    [
        ("SHELLGATE_DATABASE_URL=postgresql+psycopg://app@db/shellgate", "'.[postgres]'"),
        ("SHELLGATE_DATABASE_URL = postgresql://app@db/shellgate", "'.[postgres]'"),
        (
            "SHELLGATE_TOKENS=a:agent:0123456789abcdef",
            "pip install -q -c constraints.txt -e ./sdk -e '.'",
        ),
    ],
)
def test_make_run_reads_the_database_url_from_the_env_file(
    tmp_path: Path, line: str, install: str
) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text(f"SHELLGATE_LOG_LEVEL=info\n{line}\n")
    assert install in planned("run", f"ENV_FILE={env_file}")


def test_make_run_gives_commands_a_workspace_apart_from_the_checkout(tmp_path: Path) -> None:
    # An agent's writes to the checkout (the Makefile, setup.py, .git/hooks) would run as the
    # operator at the next make, test run or git command there.
    no_env_file = f"ENV_FILE={tmp_path / 'absent.env'}"
    workspace = ROOT / "workspace"
    plan = planned("run", no_env_file)
    assert f"mkdir -p '{workspace}'" in plan
    assert f"SHELLGATE_WORKSPACE='{workspace}' .venv/bin/shellgate serve" in plan


def test_make_run_keeps_a_workspace_the_operator_set(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("SHELLGATE_WORKSPACE=/srv/agents\n")
    for plan in (
        planned("run", f"ENV_FILE={env_file}"),
        planned("run", f"ENV_FILE={tmp_path / 'absent.env'}", SHELLGATE_WORKSPACE="/srv/agents"),
    ):
        assert "SHELLGATE_WORKSPACE=" not in plan and "mkdir" not in plan
        assert ".venv/bin/shellgate serve" in plan


def test_every_dependency_is_locked_at_a_version_its_range_allows() -> None:
    """What `make` installs (constraints.txt) and what pyproject.toml asks for must not drift
    apart: a dependency added or re-ranged there without `make lock` fails here, not on a
    fresh machine that resolves it to whatever is newest that day."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    client = tomllib.loads((ROOT / "sdk" / "pyproject.toml").read_text())["project"]
    locked: dict[str, Version] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin"
            locked[canonicalize_name(name)] = Version(version)
    # The client is this repository's own (sdk/), installed from there beside the server.
    assert f"{client['name']}=={client['version']}" in project["dependencies"]
    wanted = [r for r in project["dependencies"] if not r.startswith(client["name"])]
    wanted += client["dependencies"]
    for extra, requirements in project["optional-dependencies"].items():
        wanted += [r for r in requirements if not r.startswith("shellgate[")]
        assert extra in ("postgres", "otel", "dev"), extra
    for text in wanted:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{requirement.name} is not in constraints.txt: run make lock"
        assert requirement.specifier.contains(locked[name], prereleases=True), (
            f"constraints.txt has {requirement.name}=={locked[name]}, outside {text!r}"
        )
