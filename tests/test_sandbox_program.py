"""The server's own program is never writable by a command (app/sandbox/program.py), in a real
bwrap: where a writable path holds it (a workspace that is the server's checkout), it is bound
read-only again; the `.env` the server reads at its start is covered even while absent; and
`python -m app` does not import modules from its working directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import app
from app.core.config import Settings
from app.sandbox import Sandbox, SandboxUnavailable
from app.sandbox.bwrap import bwrap_prefix
from app.sandbox.profile import SandboxProfile
from app.sandbox.program import ServerFiles, program_paths, server_files, settings_file

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, data_dir=tmp_path / "data", workspace=tmp_path
    )
    try:
        Sandbox(settings).check()
    except SandboxUnavailable as error:
        pytest.skip(str(error))
    workspace = tmp_path / "ws"
    (workspace / "venv" / "lib").mkdir(parents=True)
    (workspace / "venv" / "lib" / "module.py").write_text("print('as shipped')\n")
    return workspace


def run(workspace: Path, server: ServerFiles, script: str, hidden: tuple[str, ...] = ()) -> str:
    profile = SandboxProfile(
        network="off", write=(str(workspace),), hidden=(*server.read_at_start, *hidden)
    )
    argv = [*bwrap_prefix(profile, str(workspace), server=server), "/bin/sh", "-c", script]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    return done.stdout + done.stderr


def test_the_program_in_a_writable_tree_is_read_only_and_the_rest_is_not(
    workspace: Path,
) -> None:
    server = ServerFiles(program=(str(workspace / "venv"),), read_at_start=())
    output = run(
        workspace,
        server,
        "echo 'print(1)' >> venv/lib/module.py; touch venv/new.py; touch mine.txt && echo mine",
    )
    assert output.count("Read-only file system") == 2, output
    assert "mine" in output
    assert (workspace / "venv" / "lib" / "module.py").read_text() == "print('as shipped')\n"
    assert not (workspace / "venv" / "new.py").exists()
    assert (workspace / "mine.txt").exists()


def test_no_parent_of_a_protected_path_can_be_moved_aside(workspace: Path) -> None:
    """A mount point cannot be renamed, but the directory above one could: a command moved
    `sdk` aside (the real `sdk/shellgate` with it, on the host) and made an `sdk/shellgate` of
    its own for the server to import; or moved a nested hidden directory's parent aside, after
    which no sandbox covered the real one. Each directory on the way is pinned (bound onto
    itself) and stays writable."""
    program = workspace / "sdk" / "shellgate"
    program.mkdir(parents=True)
    (program / "__init__.py").write_text("shipped\n")
    secret = workspace / "conf" / "deep" / "secret.env"
    secret.parent.mkdir(parents=True)
    secret.write_text("TOKEN=1\n")
    server = ServerFiles(program=(str(program),), read_at_start=())
    moves = "mv sdk sdk2; mv conf conf2; mv conf/deep conf/deep2; mv sdk/shellgate sdk/x"
    output = run(
        workspace, server, f"{moves}; touch sdk/mine conf/mine && echo wrote", (str(secret),)
    )
    assert output.count("Device or resource busy") == 4, output
    assert "wrote" in output
    assert sorted(os.listdir(workspace)) == ["conf", "sdk", "venv"]
    assert (program / "__init__.py").read_text() == "shipped\n"
    assert secret.read_text() == "TOKEN=1\n"


def test_nothing_within_a_read_only_tree_is_pinned_writable(workspace: Path) -> None:
    """A program path inside another (a virtualenv inside the package) and a hidden file inside
    it: the outer tree is bound read-only whole, and no directory in it is bound writable onto
    itself to pin the inner ones (which read-only already keeps in place)."""
    outer = workspace / "app"
    inner = outer / "vendor" / "venv"
    inner.mkdir(parents=True)
    secret = outer / "vendor" / "secret"
    secret.write_text("TOKEN=1\n")
    server = ServerFiles(program=(str(outer), str(inner)), read_at_start=())
    profile = SandboxProfile(network="off", write=(str(workspace),), hidden=(str(secret),))
    argv = bwrap_prefix(profile, str(workspace), server=server)
    assert ["--bind", str(outer / "vendor"), str(outer / "vendor")] not in [
        argv[index : index + 3] for index in range(len(argv))
    ]
    script = (
        "touch app/vendor/venv/x; touch app/vendor/y; mv app/vendor app/v2; cat app/vendor/secret"
    )
    output = run(workspace, server, script, (str(secret),))
    assert output.count("Read-only file system") == 3, output
    assert "TOKEN" not in output


def test_a_settings_file_absent_is_covered_and_no_command_makes_it(workspace: Path) -> None:
    settings = workspace / ".env"
    server = ServerFiles(program=(), read_at_start=(str(settings),))
    output = run(workspace, server, "echo SHELLGATE_SANDBOX=off > .env; cat .env")
    assert "SHELLGATE_SANDBOX" not in output
    assert settings.read_bytes() == b""  # the empty file bwrap mounted over


def test_a_settings_file_that_is_a_dangling_link_is_covered_where_it_leads(
    workspace: Path,
) -> None:
    """The server resolves `.env` at its start; a link to a file not made yet would otherwise
    let a command make the settings of the next start where the link leads."""
    link, target = workspace / ".env", workspace / "settings" / "real.env"
    target.parent.mkdir()
    link.symlink_to(target)
    server = ServerFiles(program=(), read_at_start=(os.path.realpath(link),))
    profile = SandboxProfile(network="off", write=(str(workspace),), hidden=(str(link),))
    argv = [*bwrap_prefix(profile, str(workspace), server=server), "/bin/sh", "-c"]
    script = "echo SHELLGATE_SANDBOX=off > settings/real.env; cat settings/real.env"
    done = subprocess.run([*argv, script], capture_output=True, text=True, timeout=60, check=False)
    assert "SHELLGATE_SANDBOX" not in done.stdout + done.stderr
    assert target.read_bytes() == b""  # the empty file bwrap mounted over


def test_the_program_paths_are_those_of_this_server() -> None:
    paths = program_paths()
    assert str(Path(app.__file__).resolve().parent) in paths
    assert os.path.realpath(sys.prefix) in paths
    assert str(REPO / "migrations") in paths  # a checkout's (an editable install here)
    assert all(os.path.isdir(path) for path in paths)
    assert server_files().read_at_start == (os.path.realpath(settings_file()),)


def test_an_interpreter_without_a_name_or_prefix_makes_no_working_directory_read_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An embedding interpreter may leave `sys.executable` and its prefixes empty: resolved as
    they are, they would name the working directory (the workspace, perhaps) and its parent."""
    monkeypatch.chdir(tmp_path)
    for name in ("executable", "prefix", "exec_prefix", "base_prefix", "base_exec_prefix"):
        monkeypatch.setattr(sys, name, "")
    program_paths.cache_clear()
    try:
        paths = program_paths()
    finally:
        program_paths.cache_clear()
    assert str(tmp_path) not in paths and str(tmp_path.parent) not in paths
    assert str(Path(app.__file__).resolve().parent) in paths


@pytest.mark.parametrize(
    ("planted", "options"),
    [("rich.py", ()), ("app/__init__.py", ("-P",))],
    ids=["a-module-it-imports", "an-app-package-under-P"],
)
def test_python_m_app_runs_nothing_from_its_working_directory(
    tmp_path: Path, planted: str, options: tuple[str, ...]
) -> None:
    """What a command dropped in the workspace, the server's working directory, is not run by
    the next start: a module the CLI imports (`rich`), which `python -m app` takes off the path
    once `app` is in; an `app` package itself, which only `-P` (the start the refusal below asks
    for) keeps `python -m app` from importing."""
    marker = tmp_path / "planted-ran"
    (tmp_path / planted).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / planted).write_text(f"open({str(marker)!r}, 'w').close()\n")
    done = subprocess.run(
        [sys.executable, *options, "-m", "app", "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "serve" in done.stdout
    assert not marker.exists()


def serve_refusal(
    cwd: Path, *python_options: str, **settings: str
) -> subprocess.CompletedProcess[str]:
    """`python [options] -m app serve` in `cwd`, which should stop before serving (60 s)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("SHELLGATE_")}
    env.update({f"SHELLGATE_{key.upper()}": value for key, value in settings.items()})
    return subprocess.run(
        [sys.executable, *python_options, "-m", "app", "serve"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_python_m_app_will_not_serve_from_a_directory_its_commands_write(tmp_path: Path) -> None:
    """`python -m app` imports `app` from its working directory before the installed package:
    with the workspace there (its default), a command could leave an `app` package that the
    next start runs as the server, outside the sandbox. So it stops, saying how to start, and
    makes nothing (not even the data directory)."""
    refused = serve_refusal(tmp_path)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.startswith(f"shellgate: started as `python -m app` in {tmp_path}")
    assert "`shellgate serve` or `python -P -m app serve`" in refused.stderr
    assert list(tmp_path.iterdir()) == []


def test_started_another_way_the_launch_directory_is_not_a_reason_to_stop(
    tmp_path: Path,
) -> None:
    """`-P` leaves the working directory off the path; a workspace elsewhere and the sandbox
    off expose nothing of the start. Each goes on to the next check: the data directory, which
    the test makes one that cannot be made."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    for options, settings in (
        (("-P",), {}),
        ((), {"workspace": str(workspace)}),
        ((), {"sandbox": "off"}),
    ):
        ran = serve_refusal(tmp_path, *options, **settings, data_dir="/proc/no-such/data")
        assert ran.returncode == 2, (options, settings, ran.stderr)
        assert "cannot use the data directory /proc/no-such/data" in ran.stderr, ran.stderr
