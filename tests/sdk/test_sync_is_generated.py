"""The sync client is generated from the async one (sdk/generate_sync.py): the committed
sync_*.py are exactly what the generator writes, a hand edit to one is caught, and a method
added to the async client reaches the sync one by regenerating, written once."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "sdk" / "generate_sync.py"


def run_generator(package: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(GENERATOR), *options, "--package", str(package)],
        capture_output=True,
        text=True,
        check=False,
    )


def package_copy(tmp_path: Path) -> Path:
    """The SDK's sources beside the repository's ruff settings, which the generator formats by
    (sdk/shellgate/ruff.toml extends ../../pyproject.toml)."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    copy = tmp_path / "sdk" / "shellgate"
    shutil.copytree(ROOT / "sdk" / "shellgate", copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def test_the_committed_sync_modules_are_what_the_generator_writes() -> None:
    done = run_generator(ROOT / "sdk" / "shellgate", "--check")
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_hand_edit_to_a_generated_module_fails_the_check(tmp_path: Path) -> None:
    copy = package_copy(tmp_path)
    edited = copy / "sync_stream.py"
    edited.write_text(edited.read_text() + "\n# a hand edit\n")
    done = run_generator(copy, "--check")
    assert done.returncode == 1
    assert done.stdout.splitlines() == [f"{edited} differs from what async_stream.py generates"]
    assert edited.read_text().endswith("# a hand edit\n")  # --check writes nothing


def test_a_method_added_to_the_async_client_is_generated_into_the_sync_one(
    tmp_path: Path,
) -> None:
    copy = package_copy(tmp_path)
    source = copy / "async_client.py"
    source.write_text(
        source.read_text()
        + "\n    async def version(self) -> str:\n"
        + "        return (await self._call(calls.info())).version\n"
    )
    assert run_generator(copy, "--check").returncode == 1  # the sync client is now stale
    done = run_generator(copy)
    assert done.returncode == 0, done.stderr
    generated = (copy / "sync_client.py").read_text()
    assert (
        "    def version(self) -> str:\n        return (self._call(calls.info())).version\n"
    ) in generated
    assert run_generator(copy, "--check").returncode == 0
