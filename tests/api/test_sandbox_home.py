"""What a sandboxed command can read of the server user's home (docs/sandbox.md#profiles): none
of the places where tools keep a sign-in, a token or a history, with the defaults, in a real
server started as a process with a home of the test's own."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core.config import (
    DEFAULT_SANDBOX_HIDDEN,
    ROOT_SANDBOX_HIDDEN,
    Settings,
    default_sandbox_hidden,
)
from tests.api.test_sandbox import _served
from tests.databases import SQLITE
from tests.test_serve_defaults import ServerProcess

# Where tools keep what signs in as the operator: the test's own list, so that a default that
# misses one fails here.
CREDENTIAL_FILES = (
    ".ssh/id_ed25519",
    ".aws/credentials",
    ".netrc",
    ".docker/config.json",
    ".git-credentials",
    ".config/gh/hosts.yml",
    ".config/glab-cli/config.yml",
    ".npmrc",
    ".yarnrc.yml",
    ".m2/settings.xml",
    ".gradle/gradle.properties",
    ".config/op/config",
    ".fly/config.yml",
    ".kaggle/kaggle.json",
    ".cache/huggingface/token",
    ".codex/auth.json",
    ".claude/.credentials.json",
    ".claude.json",
    ".gemini/oauth_creds.json",
    ".config/github-copilot/apps.json",
    ".mozilla/firefox/default/cookies.sqlite",
    ".config/google-chrome/Default/Cookies",
    ".config/chromium/Default/Cookies",
    ".bash_history",
    ".zsh_history",
    ".python_history",
    ".psql_history",
    ".mysql_history",
)
SECRET = "credential-in-home"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # Inside the workspace: a command sees none of the host's /tmp, where pytest's folders are.
    home = tmp_path / "work" / "home"
    for relative in CREDENTIAL_FILES:
        path = home / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{SECRET} {relative}\n", encoding="utf-8")
    (home / ".gitconfig").write_text("[user]\n\tname = ordinary-in-home\n", encoding="utf-8")
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def served(tmp_path: Path, home: Path) -> Iterator[ServerProcess]:
    yield from _served(tmp_path / "work", SQLITE)


def test_no_sign_in_token_or_history_in_the_home_is_readable(
    served: ServerProcess, home: Path
) -> None:
    with served.client() as client:
        record = client.post(
            "/v1/executions",
            json={"command": f"grep -r {SECRET} {home} 2>/dev/null; cat {home}/.gitconfig"},
        ).json()
    output = str(record["output"])
    # Each place is either gone or empty; what is not a credential stays readable.
    assert SECRET not in output, output
    assert "ordinary-in-home" in output


@pytest.mark.skipif(os.geteuid() != 0, reason="the shadow files are unreadable to others anyway")
def test_a_root_servers_command_reads_no_password_hash(served: ServerProcess) -> None:
    assert os.path.getsize("/etc/shadow") > 0
    # What only root reads, where this host has it (Debian keeps `/etc/shadow-` after an
    # update, and `/etc/security/opasswd`).
    files = [
        path
        for path in (*ROOT_SANDBOX_HIDDEN, "/etc/gshadow")
        if os.path.isfile(path) and os.path.getsize(path) > 0
    ]
    with served.client() as client:
        record = client.post(
            "/v1/executions",
            json={"command": f"cat /etc/shadow {' '.join(files)} 2>/dev/null | wc -c"},
        ).json()
    assert str(record["output"]).strip() == "0", files


def test_what_only_root_reads_is_hidden_by_default_for_a_root_server_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server run as another user cannot read those files: covering them would cost each
    of its spawns a mount for nothing."""
    for uid, expected in (
        (0, [*DEFAULT_SANDBOX_HIDDEN, *ROOT_SANDBOX_HIDDEN]),
        (1000, list(DEFAULT_SANDBOX_HIDDEN)),
    ):
        monkeypatch.setattr(os, "geteuid", lambda uid=uid: uid)
        assert default_sandbox_hidden() == expected
        hidden = Settings(_env_file=None).sandbox_hidden  # type: ignore[call-arg]
        assert ("/etc/ssh/ssh_host_ed25519_key" in hidden) is (uid == 0)
