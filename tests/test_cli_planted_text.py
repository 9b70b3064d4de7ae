"""What an approver is shown by the `shellgate` command line is what runs: text an agent planted
in a command, an env value or a path is never read as rich markup nor sent raw to the terminal,
and a long command is shown whole (real server on loopback, typer's CliRunner)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import AGENT, APPROVER, LiveServer, make_settings, serve
from tests.databases import Databases
from tests.test_cli import shellgate

PROMPT = "echo needs-approval"


@pytest.fixture(scope="module")
def prompting(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("cli-planted")
    policy = tmp / "policy.json"
    policy.write_text(
        '{"default": "allow", "rules": [{"match": "echo needs-approval*", "approval": "prompt"}]}'
    )
    with serve(make_settings(tmp, module_databases.new(), policy_file=policy)) as live:
        yield live


def _request(server: LiveServer, command: str, env: dict[str, str] | None = None) -> str:
    with server.client(AGENT) as agent:
        body = {"command": command, "async": True, "env": env or {}}
        execution = agent.post("/v1/executions", json=body).json()
    assert execution["state"] == "awaiting_approval", execution
    return str(execution["approval"]["id"])


def _deny(server: LiveServer, *approval_ids: str) -> None:
    with server.client(APPROVER) as approver:
        for approval_id in approval_ids:
            approver.post(f"/v1/approvals/{approval_id}/deny", json={"reason": "test cleanup"})


def test_approvals_table_shows_markup_escapes_and_bidi_as_text(prompting: LiveServer) -> None:
    markup = f"{PROMPT} [bold]x[/] [link=http://e.invalid]y[/link]"
    overwrite = f"{PROMPT} harmless\r\x1b[2Kecho safe"
    bidi = f"{PROMPT} \u202ex\u200by"
    ids = [
        _request(prompting, markup),
        _request(prompting, overwrite, env={"PLANTED": "a\x1b]0;t\x07b"}),
        _request(prompting, bidi),
    ]
    try:
        table = shellgate(prompting.base_url, APPROVER, "approvals")
        assert table.exit_code == 0, table.output
        # Rich markup is the command's text, not styling nor a hidden link.
        assert "[bold]x[/] [link=http://e.invalid]y[/link]" in table.stdout
        # Nothing reaches the terminal raw: each is a visible escape.
        for raw in ["\r", "\x1b", "\x07", "\u202e", "\u200b"]:
            assert raw not in table.stdout
        assert "harmless\\r\\x1b[2Kecho safe" in table.stdout
        assert "PLANTED=a\\x1b]0;t\\x07b" in table.stdout
        assert "\\u202ex\\u200by" in table.stdout
    finally:
        _deny(prompting, *ids)


def test_approvals_table_shows_all_of_a_long_command_with_its_cwd(
    prompting: LiveServer,
) -> None:
    # Past the old 60-character cut, the end of the command was `…`.
    command = f"{PROMPT} {'a' * 150} ; false && echo the-tail-that-runs"
    approval_id = _request(prompting, command)
    try:
        table = shellgate(prompting.base_url, APPROVER, "approvals")
        assert table.exit_code == 0, table.output
        assert "the-tail-that-runs" in table.stdout
        assert "…" not in table.stdout
        assert f"cwd {prompting.settings.workspace}" in table.stdout
    finally:
        _deny(prompting, approval_id)


def test_an_error_quoting_planted_text_reaches_the_terminal_escaped(
    prompting: LiveServer,
) -> None:
    result = shellgate(
        prompting.base_url, AGENT, "run", "--cwd", "/nonexistent-x\x1b[2K\u202e", "true"
    )
    assert result.exit_code == 2, result.output
    assert "\x1b" not in result.stderr and "\u202e" not in result.stderr
    assert "/nonexistent-x\\x1b[2K\\u202e" in result.stderr


def test_files_put_and_get_show_a_planted_remote_name_as_text(
    prompting: LiveServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # click strips `\x1b[…` when not writing to a terminal; `\r` and U+202E it lets through.
    name = "planted\r\u202ename\u00a0x"
    shown = "planted\\r\\u202ename\\xa0x"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "local.txt").write_text("hi\n")
    put = shellgate(prompting.base_url, AGENT, "files", "put", "local.txt", name)
    assert put.exit_code == 0, put.output
    stored = f"{prompting.settings.workspace}/{shown}"
    assert put.stdout == f"local.txt -> {stored} (3 bytes, mode 0644)\n"
    got = shellgate(prompting.base_url, AGENT, "files", "get", name, "copy.txt")
    assert got.exit_code == 0, got.output
    assert got.stdout == f"{shown} -> copy.txt (3 bytes)\n"
    assert (tmp_path / "copy.txt").read_text() == "hi\n"
    # The file's content is output: passed through as it is.
    assert shellgate(prompting.base_url, AGENT, "files", "get", name, "-").stdout == "hi\n"


def test_jobs_column_shows_line_breaks_and_odd_spaces_as_escapes(prompting: LiveServer) -> None:
    # str.split() folded all of these into plain spaces: `a\nrm` read as `a rm`.
    command = "echo a\u00a0b\rc\u2028d\necho  e"
    with prompting.client(AGENT) as agent:
        execution_id = agent.post("/v1/executions", json={"command": command}).json()["id"]
    listed = shellgate(prompting.base_url, AGENT, "jobs", "--limit", "50")
    assert listed.exit_code == 0, listed.output
    row = next(line for line in listed.stdout.splitlines() if execution_id in line)
    assert "echo a\\xa0b\\rc\\u2028d\\necho e" in row
