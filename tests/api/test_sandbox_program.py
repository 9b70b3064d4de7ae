"""A server whose workspace holds its own program (as `make run` in a checkout has it: the
workspace is the server's directory), tried as an attacker would: `python -m app serve` from a
copy of the package and its migrations, the sandbox at its defaults. Before, an allowed command
rewrote the standby's first stage, a script of the package the server runs outside the sandbox
at every spawn, and the next spawn ran what it wrote as the server; and it could write the
`.env` the next start reads (`SHELLGATE_SANDBOX=off`)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.test_sandbox import _served
from tests.databases import Databases
from tests.test_serve_defaults import ServerProcess

REPO = Path(__file__).resolve().parents[2]
FIRST_STAGE = Path("app") / "process" / "standby_enter.sh"


@pytest.fixture(scope="module")
def checkout(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[ServerProcess]:
    cwd = tmp_path_factory.mktemp("checkout")
    ignore = shutil.ignore_patterns("__pycache__")
    for part in ("app", "migrations"):
        shutil.copytree(REPO / part, cwd / part, ignore=ignore)
    yield from _served(cwd, module_databases.new(), safe_path=False)


def test_a_command_cannot_change_the_program_the_server_runs(
    checkout: ServerProcess, tmp_path: Path
) -> None:
    escaped = tmp_path / "escaped"  # written only by what runs outside the sandbox
    attack = (
        f"sed -i '2i touch {escaped}' {FIRST_STAGE}; touch app/planted.py; "
        "touch migrations/planted.py; echo SHELLGATE_SANDBOX=off > .env; "
        "touch mine.txt && echo wrote-mine; false"
    )
    with checkout.client() as agent:
        record = agent.post("/v1/executions", json={"command": attack}).json()
        assert record["output"].count("Read-only file system") == 3, record["output"]
        assert "wrote-mine" in record["output"]
        # The refusal's notice says no request widens it (the workspace is the profile's write).
        notice = next(notice for notice in record["notices"] if "sandbox refusal" in notice)
        assert "the server's own program in it read-only whatever is asked" in notice, notice
        assert str(checkout.cwd / "app") in notice
        for _ in range(3):  # standbys made after it start with the first stage
            time.sleep(1)
            done = agent.post("/v1/executions", json={"command": "echo still-works"}).json()
            assert done["output"] == "still-works\n", done
    assert not escaped.exists()
    assert (checkout.cwd / FIRST_STAGE).read_bytes() == (REPO / FIRST_STAGE).read_bytes()
    assert not (checkout.cwd / "app" / "planted.py").exists()
    assert not (checkout.cwd / "migrations" / "planted.py").exists()
    assert (checkout.cwd / ".env").read_bytes() == b""
    assert (checkout.cwd / "mine.txt").exists()
