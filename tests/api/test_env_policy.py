"""Environment rules through a real server: every `env` name of every request is judged —
executions, sessions (create, PATCH, every call), the runner and MCP — with payloads that
would run a harmless marker if they got through; approvals show env, session and pty, and what
runs after an approval is what was shown."""

from __future__ import annotations

import json
import stat
import subprocess
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from app.policy.env_rules import DEFAULT_ENV_DENY
from app.sessions.service import WRAPPER
from tests.api.test_approvals import (
    in_background,
    next_event,
    open_stream,
    pending_approval_for,
    post_as,
)
from tests.api.test_mcp import mcp_client, text_of
from tests.conftest import ADMIN, AGENT, AGENT2, APPROVER, LiveServer, make_settings, serve
from tests.databases import Databases, ServerDatabase


class Markers:
    """Harmless stand-ins for a denied command: each one, if anything ever ran it, leaves a
    file named after it; `fired()` lists those files."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.fired_dir = directory / "fired"
        self.fired_dir.mkdir(parents=True, exist_ok=True)
        self.bin_dir = directory / "bin"
        self.bin_dir.mkdir(exist_ok=True)
        self.script = self._executable(directory / "marker.sh", "bash-env")
        # A directory that, first on PATH, turns an allowed `ls` into the marker.
        self._executable(self.bin_dir / "ls", "path-ls")
        self.python = directory / "marker.py"
        self.python.write_text(f"open({str(self.fired_dir / 'python')!r}, 'w').close()\n")
        self.node = directory / "marker.js"
        self.node.write_text(
            f"require('fs').writeFileSync({json.dumps(str(self.fired_dir / 'node'))}, '')\n"
        )
        # A library that does not exist: if LD_PRELOAD reaches the loader, every program
        # complains about this very name on stderr, so the name itself is the marker.
        self.preload = str(directory / "marker-preload-lib.so")

    def _executable(self, path: Path, name: str) -> Path:
        path.write_text(f"#!/bin/sh\n: > '{self.fired_dir / name}'\necho MARKER-FIRED-{name}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
        return path

    def fired(self) -> list[str]:
        return sorted(path.name for path in self.fired_dir.iterdir())


@pytest.fixture(scope="module")
def markers(tmp_path_factory: pytest.TempPathFactory) -> Markers:
    return Markers(tmp_path_factory.mktemp("markers"))


@pytest.fixture(scope="module")
def env_server(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[LiveServer]:
    """A server of this module's own, with the default policy (and so the default env list);
    tests that change the policy put it back."""
    with serve(make_settings(tmp_path_factory.mktemp("env"), module_databases.new())) as live:
        yield live


@pytest.fixture
def admin(env_server: LiveServer) -> Iterator[httpx.Client]:
    with env_server.client(ADMIN) as client:
        yield client
        assert client.put("/v1/policy", json={}).status_code == 200


def execution_ids(server: LiveServer) -> set[str]:
    with server.client(ADMIN) as admin:
        page = admin.get("/v1/executions", params={"limit": 500}).json()
    return {item["id"] for item in page["data"]}


def session_ids(server: LiveServer) -> set[str]:
    with server.client(ADMIN) as admin:
        return {item["id"] for item in admin.get("/v1/sessions").json()["data"]}


def assert_blocked(response: httpx.Response, name: str) -> None:
    assert response.status_code == 403, response.text
    error = response.json()["error"]
    assert error["code"] == "policy_denied"
    assert error["message"] == f"Blocked environment variable: {name}"


# (form id, env given the markers, the name the 403 must name): at least 20 ways to smuggle
# code in through the environment.
FORMS: list[tuple[str, Callable[[Markers], dict[str, str]], str]] = [
    ("bash-env", lambda m: {"BASH_ENV": str(m.script)}, "BASH_ENV"),
    ("bash-env-subst", lambda m: {"BASH_ENV": f"$({m.script})"}, "BASH_ENV"),
    ("env-posix", lambda m: {"ENV": str(m.script)}, "ENV"),
    ("bash-func", lambda m: {"BASH_FUNC_ls": f"() {{ {m.script}; }}"}, "BASH_FUNC_ls"),
    ("bash-func-bare", lambda m: {"BASH_FUNC_": f"() {{ {m.script}; }}"}, "BASH_FUNC_"),
    (
        "shellopts-xtrace-ps4",
        lambda m: {"SHELLOPTS": "xtrace", "PS4": f"$({m.script})"},
        "SHELLOPTS",
    ),
    ("ps4-alone", lambda m: {"PS4": f"$({m.script}) "}, "PS4"),
    ("bashopts", lambda m: {"BASHOPTS": "extdebug"}, "BASHOPTS"),
    ("ps0", lambda m: {"PS0": f"$({m.script})"}, "PS0"),
    ("ps1", lambda m: {"PS1": f"$({m.script})"}, "PS1"),
    ("ps2", lambda m: {"PS2": f"$({m.script})"}, "PS2"),
    ("prompt-command", lambda m: {"PROMPT_COMMAND": str(m.script)}, "PROMPT_COMMAND"),
    ("ifs", lambda m: {"IFS": "/"}, "IFS"),
    ("path", lambda m: {"PATH": f"{m.bin_dir}:/usr/bin:/bin"}, "PATH"),
    ("path-empty", lambda m: {"PATH": ""}, "PATH"),
    ("ld-preload", lambda m: {"LD_PRELOAD": m.preload}, "LD_PRELOAD"),
    ("ld-library-path", lambda m: {"LD_LIBRARY_PATH": str(m.directory)}, "LD_LIBRARY_PATH"),
    ("ld-audit", lambda m: {"LD_AUDIT": m.preload}, "LD_AUDIT"),
    ("gconv-path", lambda m: {"GCONV_PATH": str(m.directory)}, "GCONV_PATH"),
    ("pythonstartup", lambda m: {"PYTHONSTARTUP": str(m.python)}, "PYTHONSTARTUP"),
    ("perl5opt", lambda m: {"PERL5OPT": f"-e system(q({m.script}))"}, "PERL5OPT"),
    ("node-options", lambda m: {"NODE_OPTIONS": f"--require {m.node}"}, "NODE_OPTIONS"),
    ("rubyopt", lambda m: {"RUBYOPT": f"-r{m.script}"}, "RUBYOPT"),
    (
        "hidden-after-harmless-names",
        lambda m: {"A": "1", "B": "2", "GREETING": "hi", "LD_PRELOAD": m.preload},
        "LD_PRELOAD",
    ),
    ("first-of-two-denied", lambda m: {"PATH": str(m.bin_dir), "BASH_ENV": str(m.script)}, "PATH"),
    ("empty-value", lambda m: {"BASH_ENV": ""}, "BASH_ENV"),
    # Programs an agent runs every day run these values as shell text (issue 28).
    (
        "git-config-parameters",
        lambda m: {"GIT_CONFIG_PARAMETERS": f"'core.pager={m.script}'"},
        "GIT_CONFIG_PARAMETERS",
    ),
    (
        "git-config-count",
        lambda m: {
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": "core.pager",
            "GIT_CONFIG_VALUE_0": str(m.script),
        },
        "GIT_CONFIG_COUNT",
    ),
    ("git-config-value", lambda m: {"GIT_CONFIG_VALUE_0": str(m.script)}, "GIT_CONFIG_VALUE_0"),
    ("git-ssh-command", lambda m: {"GIT_SSH_COMMAND": str(m.script)}, "GIT_SSH_COMMAND"),
    ("git-ssh", lambda m: {"GIT_SSH": str(m.script)}, "GIT_SSH"),
    ("git-external-diff", lambda m: {"GIT_EXTERNAL_DIFF": str(m.script)}, "GIT_EXTERNAL_DIFF"),
    ("git-pager", lambda m: {"GIT_PAGER": str(m.script)}, "GIT_PAGER"),
    ("rsync-rsh", lambda m: {"RSYNC_RSH": str(m.script)}, "RSYNC_RSH"),
    ("rsync-connect-prog", lambda m: {"RSYNC_CONNECT_PROG": str(m.script)}, "RSYNC_CONNECT_PROG"),
    ("pager", lambda m: {"PAGER": str(m.script)}, "PAGER"),
    ("manpager", lambda m: {"MANPAGER": str(m.script)}, "MANPAGER"),
    ("lessopen", lambda m: {"LESSOPEN": f"|{m.script} %s"}, "LESSOPEN"),
    ("lessedit", lambda m: {"LESSEDIT": str(m.script)}, "LESSEDIT"),
    ("editor", lambda m: {"EDITOR": str(m.script)}, "EDITOR"),
    ("visual", lambda m: {"VISUAL": str(m.script)}, "VISUAL"),
    ("fcedit", lambda m: {"FCEDIT": str(m.script)}, "FCEDIT"),
    ("tar-options", lambda m: {"TAR_OPTIONS": f"--to-command={m.script}"}, "TAR_OPTIONS"),
    ("zipopt", lambda m: {"ZIPOPT": f"-T -TT {m.script}"}, "ZIPOPT"),
]


# What every form runs if it got through: `ls`, `true`, a python, a node and a perl one-liner
# (each absent interpreter simply fails), so that each payload has its chance to fire.
TRIGGER = (
    "ls >/dev/null; true; "
    "command -v python3 >/dev/null && python3 -c pass; "
    "command -v node >/dev/null && node -e 0; "
    "command -v perl >/dev/null && perl -e 1; true"
)


# --- the default deny list, on every endpoint ---------------------------------------------------


def test_the_default_env_rules_are_the_documented_list(env_server: LiveServer) -> None:
    with env_server.client(AGENT) as agent:
        env = agent.get("/v1/policy").json()["env"]
    assert env == {"deny": list(DEFAULT_ENV_DENY), "prompt": []}
    assert len(DEFAULT_ENV_DENY) == 52


@pytest.mark.parametrize(("form", "make_env", "name"), FORMS, ids=[form[0] for form in FORMS])
def test_env_payload_is_refused_and_its_marker_never_fires(
    env_server: LiveServer,
    markers: Markers,
    form: str,
    make_env: Callable[[Markers], dict[str, str]],
    name: str,
) -> None:
    before = execution_ids(env_server)
    with env_server.client(AGENT) as agent:
        response = agent.post("/v1/executions", json={"command": TRIGGER, "env": make_env(markers)})
    assert_blocked(response, name)
    assert "MARKER-FIRED" not in response.text and markers.preload not in response.text
    assert execution_ids(env_server) == before  # nothing ran, nothing stored
    assert markers.fired() == []


@pytest.mark.settings(policy_file=None)
def test_without_the_env_rules_the_same_payloads_do_fire(
    fresh_server: LiveServer, tmp_path: Path
) -> None:
    """The control experiment: with the deny list lifted (`"deny": []`), BASH_ENV, PATH and
    LD_PRELOAD really do run the marker — which is why they are denied by default."""
    markers = Markers(tmp_path / "control")
    with fresh_server.client(ADMIN) as admin:
        assert admin.put("/v1/policy", json={"env": {"deny": []}}).status_code == 200
    with fresh_server.client(AGENT) as agent:
        bash_env = agent.post(
            "/v1/executions", json={"command": "true", "env": {"BASH_ENV": str(markers.script)}}
        ).json()
        path = agent.post(
            "/v1/executions",
            json={"command": "ls", "env": {"PATH": f"{markers.bin_dir}:/usr/bin:/bin"}},
        ).json()
        preload = agent.post(
            "/v1/executions", json={"command": "true", "env": {"LD_PRELOAD": markers.preload}}
        ).json()
    assert markers.fired() == ["bash-env", "path-ls"]
    assert "MARKER-FIRED-bash-env" in bash_env["output"]
    assert "MARKER-FIRED-path-ls" in path["output"]
    assert markers.preload in preload["output"]  # the loader names the library it tried


def test_an_ordinary_env_still_runs(env_server: LiveServer) -> None:
    with env_server.client(AGENT) as agent:
        response = agent.post(
            "/v1/executions",
            json={
                "command": 'printf "%s|%s|%s" "$GREETING" "$path" "$LD"',
                "env": {"GREETING": "$(not run)", "path": "lower-case is another name", "LD": "x"},
            },
        )
    assert response.status_code == 200, response.text
    assert response.json()["output"] == "$(not run)|lower-case is another name|x"


def test_session_create_with_a_denied_name_is_refused_and_nothing_is_stored(
    env_server: LiveServer, markers: Markers
) -> None:
    before = session_ids(env_server)
    with env_server.client(AGENT) as agent:
        response = agent.post("/v1/sessions", json={"env": {"BASH_ENV": str(markers.script)}})
    assert_blocked(response, "BASH_ENV")
    assert session_ids(env_server) == before
    assert markers.fired() == []


def test_session_patch_with_a_denied_name_is_refused_and_the_env_is_unchanged(
    env_server: LiveServer, markers: Markers
) -> None:
    with env_server.client(AGENT) as agent:
        session = agent.post("/v1/sessions", json={"env": {"KEEP": "me"}}).json()
        response = agent.patch(
            f"/v1/sessions/{session['id']}",
            json={"env": {"KEEP": "me", "PATH": str(markers.bin_dir)}},
        )
        assert_blocked(response, "PATH")
        assert agent.get(f"/v1/sessions/{session['id']}").json()["env"] == {"KEEP": "me"}
        ran = agent.post(f"/v1/sessions/{session['id']}/run", json={"command": "ls >/dev/null"})
        assert ran.status_code == 200
        assert json.loads(ran.text.splitlines()[-1])["exit_code"] == 0
        agent.delete(f"/v1/sessions/{session['id']}")
    assert markers.fired() == []


def test_execution_in_a_session_is_judged_with_the_call_env(
    env_server: LiveServer, markers: Markers
) -> None:
    with env_server.client(AGENT) as agent:
        session = agent.post("/v1/sessions", json={}).json()
        before = execution_ids(env_server)
        response = agent.post(
            "/v1/executions",
            json={"command": "true", "session": session["id"], "env": {"ENV": str(markers.script)}},
        )
        assert_blocked(response, "ENV")
        assert execution_ids(env_server) == before
        agent.delete(f"/v1/sessions/{session['id']}")


def test_a_session_env_the_policy_comes_to_deny_blocks_every_later_call(
    env_server: LiveServer, admin: httpx.Client
) -> None:
    """Judged at create and again at every call under the policy in force: a session made
    while `MY_TOKEN` was fine cannot run once the policy denies it (fail closed)."""
    with env_server.client(AGENT) as agent:
        session = agent.post("/v1/sessions", json={"env": {"MY_TOKEN": "t"}}).json()
        assert session["env"] == {"MY_TOKEN": "t"}
        assert admin.put("/v1/policy", json={"env": {"deny": ["MY_*"]}}).status_code == 200
        before = execution_ids(env_server)
        run = agent.post(f"/v1/sessions/{session['id']}/run", json={"command": "echo hi"})
        assert_blocked(run, "MY_TOKEN")
        submitted = agent.post(
            "/v1/executions", json={"command": "echo hi", "session": session["id"]}
        )
        assert_blocked(submitted, "MY_TOKEN")
        assert execution_ids(env_server) == before
        # The owner can repair the session by dropping the name.
        patched = agent.patch(f"/v1/sessions/{session['id']}", json={"env": {}})
        assert patched.status_code == 200
        run = agent.post(f"/v1/sessions/{session['id']}/run", json={"command": "echo hi"})
        assert run.status_code == 200
        assert json.loads(run.text.splitlines()[0])["stdout"] == "hi\n"
        agent.delete(f"/v1/sessions/{session['id']}")


@pytest.mark.parametrize(
    "name", ["__SHELLGATE_COMMAND", "__SHELLGATE_SAVE_TO", "__shellgate_save_to", "__shellgate_x"]
)
def test_the_session_wrappers_own_names_are_refused_in_every_env(
    env_server: LiveServer, markers: Markers, name: str
) -> None:
    """A call's `__SHELLGATE_COMMAND` replaced the command the policy judged (`true`) with its
    value; `__shellgate_save_to` sent the session's state to a file of the caller's choosing."""
    value = str(markers.script)
    message = (
        f"env name {name} is reserved: names starting with __SHELLGATE_ or __shellgate_ "
        "are the server's own"
    )
    with env_server.client(AGENT) as agent:
        session = agent.post("/v1/sessions", json={}).json()["id"]
        before = execution_ids(env_server), session_ids(env_server)
        for method, path, body in (
            (
                "POST",
                "/v1/executions",
                {"command": "true", "session": session, "env": {name: value}},
            ),
            ("POST", "/v1/executions", {"command": "true", "env": {name: value}}),
            ("POST", "/v1/sessions", {"env": {name: value}}),
            ("PATCH", f"/v1/sessions/{session}", {"env": {name: value}}),
            ("POST", "/v1/policy/evaluate", {"command": "true", "env": {name: value}}),
        ):
            response = agent.request(method, path, json=body)
            assert response.status_code == 422, (path, response.text)
            assert response.json()["error"]["message"] == message
        assert (execution_ids(env_server), session_ids(env_server)) == before
        assert agent.get(f"/v1/sessions/{session}").json()["env"] == {}
        agent.delete(f"/v1/sessions/{session}")
    assert markers.fired() == []


def test_the_session_wrapper_runs_the_judged_command_whatever_the_call_env_names(
    tmp_path: Path,
) -> None:
    # The wrapper on its own, as a call runs it: a call env naming its inputs is skipped.
    scratch, state = tmp_path / "scratch", tmp_path / "state.sh"
    env = {
        "PATH": "/usr/bin:/bin",
        "__SHELLGATE_COMMAND": "echo judged",
        "__SHELLGATE_SCRATCH": str(scratch),
        "__SHELLGATE_SAVE_TO": str(state),
        "__SHELLGATE_CALL_KEYS": "__SHELLGATE_COMMAND __shellgate_save_to GREETING",
        "__SHELLGATE_CALL___SHELLGATE_COMMAND": "echo smuggled",
        "__SHELLGATE_CALL___shellgate_save_to": str(tmp_path / "elsewhere"),
        "__SHELLGATE_CALL_GREETING": "hi",
    }
    ran = subprocess.run(
        ["bash", "-c", WRAPPER + "\necho $GREETING"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert ran.stdout == "judged\nhi\n", ran.stderr
    assert state.exists() and not (tmp_path / "elsewhere").exists()


def test_an_env_value_a_program_runs_as_shell_text_is_judged_as_the_command_would_be(
    env_server: LiveServer, admin: httpx.Client, markers: Markers
) -> None:
    """`GIT_EXTERNAL_DIFF='m' git diff` is read in a command's text, where the deny rule sees
    `m`; given as the request's env it must be read too, or the env is a way around the rule."""
    rule = {"match": f"{markers.script}*", "approval": "deny"}
    assert admin.put("/v1/policy", json={"rules": [rule]}).status_code == 200
    workspace = env_server.settings.workspace
    (workspace / "diff-a").write_text("a\n")
    (workspace / "diff-b").write_text("b\n")
    diff = "git diff --no-index diff-a diff-b"
    with env_server.client(AGENT) as agent:
        inline = agent.post(
            "/v1/executions", json={"command": f"GIT_EXTERNAL_DIFF={markers.script} {diff}"}
        )
        assert inline.status_code == 403, inline.text
        before = execution_ids(env_server)
        session = agent.post("/v1/sessions", json={}).json()["id"]
        for request in (
            {"command": diff, "env": {"GIT_EXTERNAL_DIFF": str(markers.script)}},
            {"command": diff, "env": {"GIT_EXTERNAL_DIFF": f"true; {markers.script} x"}},
            {"command": diff, "env": {"GIT_EXTERNAL_DIFF": f"echo $({markers.script})"}},
            {
                "command": diff,
                "session": session,
                "env": {"GIT_EXTERNAL_DIFF": f"{markers.script}"},
            },
            # Past the inline size the texts are read in the reader children
            # (app/policy/reader_process.py): the command, and the script its env hands git.
            {"command": diff + "; true" * 200, "env": {"GIT_EXTERNAL_DIFF": str(markers.script)}},
            {"command": diff, "env": {"GIT_EXTERNAL_DIFF": "true; " * 200 + str(markers.script)}},
        ):
            response = agent.post("/v1/executions", json=request)
            assert response.status_code == 403, response.text
            assert response.json()["error"]["details"] == {"rule": rule["match"]}
        dry = agent.post(
            "/v1/policy/evaluate",
            json={"command": diff, "env": {"GIT_EXTERNAL_DIFF": str(markers.script)}},
        ).json()
        assert (dry["verdict"], dry["matched_segment"]) == ("deny", str(markers.script))
        agent.delete(f"/v1/sessions/{session}")
        assert execution_ids(env_server) == before
        # An ordinary value still runs: only what the rules name is refused.
        plain = agent.post(
            "/v1/executions", json={"command": diff, "env": {"GIT_AUTHOR_NAME": "cat"}}
        )
        assert plain.status_code == 200, plain.text
    assert markers.fired() == []


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("name", "value"), [("BASH_ENV", "marker"), ("LD_PRELOAD", "marker"), ("PATH", "bin")]
)
async def test_the_mcp_bash_tool_refuses_a_denied_env_name(
    env_server: LiveServer, markers: Markers, name: str, value: str
) -> None:
    payload = {"marker": str(markers.script), "bin": str(markers.bin_dir)}[value]
    before = execution_ids(env_server)
    with anyio.fail_after(25):
        async with mcp_client(env_server) as client:
            result = await client.call_tool("bash", {"command": "ls", "env": {name: payload}})
    assert result.is_error is True
    assert text_of(result) == f"Blocked environment variable: {name}"
    assert execution_ids(env_server) == before
    assert markers.fired() == []


# --- env globs from a policy file ----------------------------------------------------------------


@pytest.fixture(scope="module")
def file_policy_server(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("env-file")
    path = tmp / "policy.yaml"
    path.write_text(
        "default: allow\nenv:\n  deny: ['SECRET_*', '*_PRELOAD', 'X*Y*Z']\n  prompt: ['AWS_*']\n"
    )
    with serve(make_settings(tmp, module_databases.new(), policy_file=path)) as live:
        yield live


@pytest.mark.parametrize(
    ("name", "status"),
    [
        ("SECRET_KEY", 403),
        ("SECRET_", 403),
        ("LD_PRELOAD", 403),
        ("XaYbZ", 403),
        ("XYZ", 403),
        ("XYZW", 200),
        ("secret_key", 200),  # names are case-sensitive, as bash's are
        ("MY_SECRET_KEY", 200),
        ("BASH_ENV", 200),  # an explicit deny list replaces the built-in one
        ("AWS_PROFILE", 202),
    ],
)
def test_env_globs_come_from_the_policy_file(
    file_policy_server: LiveServer, name: str, status: int
) -> None:
    with file_policy_server.client(AGENT) as agent:
        response = agent.post(
            "/v1/executions",
            json={"command": "true", "env": {name: "v"}, "approval_wait": 0},
        )
    assert response.status_code == status, response.text
    if status == 403:
        assert_blocked(response, name)
    if status == 202:
        body = response.json()
        assert body["state"] == "awaiting_approval"
        assert body["approval"]["reason"] == (
            f"Prompt required for environment variables: {name} (AWS_*)"
        )
        with file_policy_server.client(AGENT) as agent:
            agent.post(f"/v1/executions/{body['id']}/cancel")


def test_a_bad_env_glob_is_refused_and_the_policy_is_unchanged(admin: httpx.Client) -> None:
    before = admin.get("/v1/policy").json()
    for env in ({"deny": ["BAD-NAME"]}, {"prompt": ["A B"]}, {"deny": [""]}, {"other": []}):
        response = admin.put("/v1/policy", json={"env": env})
        assert response.status_code == 422, response.text
    assert admin.get("/v1/policy").json() == before


# --- approvals show everything that will run ------------------------------------------------------

PROMPT_ALL = {"default": "prompt", "env": {"prompt": ["AWS_*"]}}


@pytest.fixture(scope="module")
def prompt_server(
    tmp_path_factory: pytest.TempPathFactory, module_databases: Databases
) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("env-prompt")
    path = tmp / "policy.json"
    path.write_text(json.dumps(PROMPT_ALL))
    with serve(make_settings(tmp, module_databases.new(), policy_file=path)) as live:
        yield live


def test_approval_shows_the_env_and_what_runs_is_exactly_what_was_shown(
    prompt_server: LiveServer, markers: Markers
) -> None:
    payload = f"$({markers.script})"
    command = 'echo hello; printf "X=%s\\n" "$X"'
    with prompt_server.client(APPROVER) as approver:
        waiting = in_background(
            post_as(prompt_server, AGENT, {"command": command, "env": {"X": payload}})
        )
        approval = pending_approval_for(approver, command)
        assert approval["env"] == {"X": payload}
        assert approval["session"] is None
        assert approval["pty"] is False
        listed = approver.get("/v1/approvals", params={"state": "pending"}).json()["data"]
        assert [item["env"] for item in listed if item["id"] == approval["id"]] == [{"X": payload}]
        decided = approver.post(f"/v1/approvals/{approval['id']}/approve", json={})
        assert decided.json()["env"] == {"X": payload}
    result = waiting.result(timeout=30)
    assert result.status_code == 200, result.text
    assert result.json()["output"] == f"hello\nX={payload}\n"
    assert markers.fired() == []


def test_the_approvals_stream_carries_env_session_and_pty(prompt_server: LiveServer) -> None:
    with (
        open_stream(prompt_server, APPROVER) as socket,
        prompt_server.client(AGENT) as agent,
    ):
        assert next_event(socket)["type"] == "snapshot"
        body = agent.post(
            "/v1/executions",
            json={"command": "echo streamed", "env": {"Y": "$(y)"}, "pty": True, "async": True},
        ).json()
        event = next_event(socket)
        while (
            event["type"] != "approval.requested"
            or event["approval"]["id"] != (body["approval"]["id"])
        ):
            event = next_event(socket)
        approval = event["approval"]
        assert (approval["env"], approval["session"], approval["pty"]) == (
            {"Y": "$(y)"},
            None,
            True,
        )
        agent.post(f"/v1/executions/{body['id']}/cancel")


def test_a_prompted_env_name_needs_an_approval_even_for_an_allowed_command(
    file_policy_server: LiveServer,
) -> None:
    with (
        file_policy_server.client(AGENT) as agent,
        file_policy_server.client(APPROVER) as approver,
    ):
        body = agent.post(
            "/v1/executions",
            json={"command": "echo $AWS_PROFILE", "env": {"AWS_PROFILE": "dev"}, "async": True},
        ).json()
        assert body["state"] == "awaiting_approval"
        approval = approver.get(f"/v1/approvals/{body['approval']['id']}").json()
        assert approval["env"] == {"AWS_PROFILE": "dev"}
        approver.post(f"/v1/approvals/{approval['id']}/approve", json={})
        final = agent.get(f"/v1/executions/{body['id']}", params={"wait": 20}).json()
    assert final["state"] == "completed"
    assert final["output"] == "dev\n"


def test_session_approval_shows_the_session_pty_and_merged_env(
    prompt_server: LiveServer,
) -> None:
    with prompt_server.client(AGENT) as agent, prompt_server.client(APPROVER) as approver:
        session = agent.post(
            "/v1/sessions", json={"env": {"A": "session", "B": "session"}, "pty": True}
        ).json()
        body = agent.post(
            "/v1/executions",
            json={
                "command": 'echo "$A $B"',
                "session": session["id"],
                "env": {"B": "call"},
                "async": True,
            },
        ).json()
        approval = approver.get(f"/v1/approvals/{body['approval']['id']}").json()
        assert approval["session"] == session["id"]
        assert approval["pty"] is True
        assert approval["env"] == {"A": "session", "B": "call"}
        approver.post(f"/v1/approvals/{approval['id']}/approve", json={})
        final = agent.get(f"/v1/executions/{body['id']}", params={"wait": 20}).json()
        assert final["state"] == "completed"
        assert final["output"].strip() == "session call"
        agent.delete(f"/v1/sessions/{session['id']}")


def test_runner_call_waits_for_an_approval_that_shows_the_session_env(
    prompt_server: LiveServer,
) -> None:
    with prompt_server.client(AGENT) as agent, prompt_server.client(APPROVER) as approver:
        session = agent.post("/v1/sessions", json={"env": {"AWS_REGION": "eu"}}).json()
        command = "echo region-$AWS_REGION"

        def run() -> httpx.Response:
            with prompt_server.client(AGENT) as client:
                return client.post(f"/v1/sessions/{session['id']}/run", json={"command": command})

        streaming: Future[httpx.Response] = in_background(run)
        approval = pending_approval_for(approver, command)
        assert approval["env"] == {"AWS_REGION": "eu"}
        assert approval["session"] == session["id"]
        assert "AWS_REGION (AWS_*)" in approval["reason"]
        approver.post(f"/v1/approvals/{approval['id']}/approve", json={})
        items = [json.loads(line) for line in streaming.result(timeout=30).text.splitlines()]
        assert items[0]["stdout"] == "region-eu\n"
        assert items[-1]["exit_code"] == 0
        agent.delete(f"/v1/sessions/{session['id']}")


def test_an_approval_goes_stale_when_the_session_env_changes_before_the_decision(
    prompt_server: LiveServer, markers: Markers
) -> None:
    with prompt_server.client(AGENT) as agent, prompt_server.client(APPROVER) as approver:
        session = agent.post("/v1/sessions", json={"env": {"TARGET": "shown"}}).json()
        body = agent.post(
            "/v1/executions",
            json={"command": f"{markers.script}", "session": session["id"], "async": True},
        ).json()
        approval = approver.get(f"/v1/approvals/{body['approval']['id']}").json()
        assert approval["env"] == {"TARGET": "shown"}
        patched = agent.patch(f"/v1/sessions/{session['id']}", json={"env": {"TARGET": "swapped"}})
        assert patched.status_code == 200
        approver.post(f"/v1/approvals/{approval['id']}/approve", json={})
        final = agent.get(f"/v1/executions/{body['id']}", params={"wait": 20}).json()
        agent.delete(f"/v1/sessions/{session['id']}")
    assert final["state"] == "rejected"
    assert "environment changed after the approval was requested" in final["notices"][-1]
    assert final["started_at"] is None
    assert markers.fired() == []


# --- the pending-approvals cap -------------------------------------------------------------------

CAPPED_POLICY = {"rules": [{"match": "echo ask-*", "approval": "prompt"}]}


def capped_server(tmp: Path, database: ServerDatabase, cap: int) -> Any:
    path = tmp / "policy.json"
    path.write_text(json.dumps(CAPPED_POLICY))
    return serve(make_settings(tmp, database, policy_file=path, max_pending_approvals=cap))


def ask(client: httpx.Client, n: int) -> httpx.Response:
    return client.post("/v1/executions", json={"command": f"echo ask-{n}", "async": True})


def test_pending_approvals_are_capped_per_owner(tmp_path: Path, database: ServerDatabase) -> None:
    with (
        capped_server(tmp_path, database, 3) as live,
        live.client(AGENT) as alice,
        live.client(AGENT2) as bob,
        live.client(APPROVER) as approver,
    ):
        accepted = [ask(alice, n) for n in range(3)]
        assert [response.status_code for response in accepted] == [202, 202, 202]
        before = execution_ids(live)
        refused = ask(alice, 3)
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["message"] == "Too many pending approvals (3)."
        assert refused.json()["error"]["code"] == "pending_approval_limit"
        assert 1 <= int(refused.headers["Retry-After"]) <= 60
        assert execution_ids(live) == before  # nothing stored for the refused request
        assert ask(bob, 0).status_code == 202  # another owner is not buried
        # A decision frees a place.
        first = accepted[0].json()["approval"]["id"]
        assert approver.post(f"/v1/approvals/{first}/deny", json={}).status_code == 200
        assert ask(alice, 4).status_code == 202
        assert ask(alice, 5).status_code == 429
        # The runner's prompted calls count too, and are refused before the stream starts.
        session = alice.post("/v1/sessions", json={}).json()
        run = alice.post(f"/v1/sessions/{session['id']}/run", json={"command": "echo ask-run"})
        assert run.status_code == 429, run.text
        assert run.json()["error"]["message"] == "Too many pending approvals (3)."
        # An allowed command is never counted.
        assert alice.post("/v1/executions", json={"command": "echo free"}).status_code == 200


async def _ask_concurrently(live: LiveServer, count: int) -> list[int]:
    async with live.async_client(AGENT) as client:

        async def one(n: int) -> int:
            response = await client.post(
                "/v1/executions", json={"command": f"echo ask-{n}", "async": True}
            )
            return response.status_code

        with anyio.fail_after(60):
            results: list[int] = []

            async def collect(n: int) -> None:
                results.append(await one(n))

            async with anyio.create_task_group() as group:
                for n in range(count):
                    group.start_soon(collect, n)
        return results


def _pending_of(live: LiveServer, owner: str) -> int:
    with live.client(ADMIN) as admin:
        listed = admin.get("/v1/approvals", params={"state": "pending", "limit": 500}).json()
    return sum(1 for item in listed["data"] if item["requested_by"] == owner)


def test_concurrent_requests_cannot_pass_the_cap_together(
    tmp_path: Path, database: ServerDatabase
) -> None:
    with capped_server(tmp_path, database, 5) as live:
        statuses = anyio.run(_ask_concurrently, live, 24)
        assert sorted(statuses) == [202] * 5 + [429] * 19
        assert _pending_of(live, "alice") == 5


# --- the dry run ----------------------------------------------------------------------------------


def test_evaluate_reports_env_verdicts_cwd_and_the_combined_verdict(
    env_server: LiveServer, admin: httpx.Client, markers: Markers
) -> None:
    policy = {
        "rules": [{"match": "git *", "approval": "allow"}],
        "env": {"deny": ["BASH_ENV"], "prompt": ["AWS_*"]},
    }
    assert admin.put("/v1/policy", json=policy).status_code == 200
    before = execution_ids(env_server)
    with env_server.client(AGENT) as agent:
        body = agent.post(
            "/v1/policy/evaluate",
            json={
                "command": "git status",
                "env": {"A": "1", "AWS_KEY": "k", "BASH_ENV": str(markers.script)},
                "cwd": "/tmp",
            },
        ).json()
        assert body["verdict"] == "deny"
        assert body["reason"] == "Blocked environment variable: BASH_ENV"
        assert body["command_verdict"] == "allow"
        assert body["matched_rule"] == {"match": "git *", "approval": "allow"}
        assert body["matched_segment"] == "git status"
        assert body["env_verdict"] == "deny"
        assert body["env"] == [
            {"name": "A", "verdict": "allow", "rule": None},
            {"name": "AWS_KEY", "verdict": "prompt", "rule": "AWS_*"},
            {"name": "BASH_ENV", "verdict": "deny", "rule": "BASH_ENV"},
        ]
        assert body["cwd"] == "/tmp"
        assert body["unreadable_reasons"] == []
        assert body["interception"] is None

        prompted = agent.post(
            "/v1/policy/evaluate", json={"command": "cd /var && git log", "env": {"AWS_X": "1"}}
        ).json()
        assert prompted["verdict"] == "prompt"
        assert prompted["reason"] == "Prompt required for environment variables: AWS_X (AWS_*)"
        assert prompted["cwd"] == "/var"
        assert prompted["cd_rewrite"] == {"cwd": "/var", "command": "git log"}
        # Compound text: the `git *` allow cannot vouch for it; the default (allow) decides.
        assert prompted["command_verdict"] == "allow"
        assert prompted["matched_rule"] is None and prompted["matched_segment"] is None

        relative = agent.post("/v1/policy/evaluate", json={"command": "ls", "cwd": "sub"}).json()
        assert relative["cwd"] == str(env_server.settings.workspace / "sub")
        assert relative["env"] == [] and relative["env_verdict"] == "allow"

        bad = agent.post("/v1/policy/evaluate", json={"command": "ls", "env": {"1X": "v"}})
        assert bad.status_code == 422
        assert bad.json()["error"]["message"] == "Invalid bash env name: 1X"
    assert execution_ids(env_server) == before
    assert markers.fired() == []


def test_the_command_is_judged_in_its_effective_working_directory(
    env_server: LiveServer,
) -> None:
    """The request's cwd (or a leading `cd` target) reaches the critical patterns: `rm -rf .`
    is harmless in a scratch directory and critical in `/`. `false &&` keeps the submitted one
    from ever running, whatever the verdict."""
    command = "false && rm -rf ."
    with env_server.client(AGENT) as agent:
        in_root = agent.post("/v1/policy/evaluate", json={"command": command, "cwd": "/"}).json()
        assert in_root["verdict"] == "prompt" and in_root["critical_hits"], in_root
        by_cd = agent.post("/v1/policy/evaluate", json={"command": f"cd / && {command}"}).json()
        assert by_cd["verdict"] == "prompt" and by_cd["cwd"] == "/"
        scratch = agent.post(
            "/v1/policy/evaluate", json={"command": command, "cwd": "/tmp/scratch-x"}
        ).json()
        assert scratch["verdict"] == "allow" and scratch["critical_hits"] == []
        held = agent.post(
            "/v1/executions", json={"command": command, "cwd": "/", "async": True}
        ).json()
        assert held["state"] == "awaiting_approval"
        assert agent.post(f"/v1/executions/{held['id']}/cancel").status_code == 200


def test_a_working_directory_is_judged_with_its_symlinks_followed_too(
    env_server: LiveServer, tmp_path: Path
) -> None:
    """A link in the workspace to `/` made `rm -rf .` in it look like a delete of a scratch
    directory, while bash, which follows the link, would run it in `/`. `false &&` keeps the
    submitted command from ever running, whatever the verdict."""
    link = env_server.settings.workspace / f"root-link-{tmp_path.name}"
    link.symlink_to("/")
    command = "false && rm -rf ."
    with env_server.client(AGENT) as agent:
        for body in (
            {"command": command, "cwd": link.name},
            {"command": f"cd {link.name} && {command}"},
        ):
            _held_as_critical(agent, body)
        plain = agent.post(
            "/v1/policy/evaluate", json={"command": command, "cwd": str(tmp_path)}
        ).json()
        assert plain["verdict"] == "allow"


@pytest.mark.settings(workspace="/")
def test_a_leading_cd_is_followed_once_from_where_it_runs(fresh_server: LiveServer) -> None:
    """The rewrite's directory was taken as the start *and* the `cd` it came from was followed
    again: from a workspace `/`, `cd etc && rm -rf .` was judged in /etc/etc."""
    with fresh_server.client(AGENT) as agent:
        body = {"command": "cd etc && false && rm -rf ."}
        dry = agent.post("/v1/policy/evaluate", json=body).json()
        assert (dry["verdict"], dry["cwd"], dry["critical_hits"]) == (
            "prompt",
            "/etc",
            ["rm-recursive-root-or-home"],
        ), dry
        held = agent.post("/v1/executions", json={**body, "async": True}).json()
        assert (held["state"], held["cwd"]) == ("awaiting_approval", "/etc"), held
        assert agent.post(f"/v1/executions/{held['id']}/cancel").status_code == 200


def test_a_home_the_env_sets_is_what_a_tilde_means_to_the_critical_patterns(
    env_server: LiveServer,
) -> None:
    """`HOME=/` makes `~/etc` name `/etc`; it was judged as the server's own `~/etc`, a
    harmless directory. `false &&` keeps the submitted commands from ever running."""
    command = "false && rm -rf ~/etc"
    with env_server.client(AGENT) as agent:
        dry = agent.post(
            "/v1/policy/evaluate", json={"command": command, "env": {"HOME": "/"}}
        ).json()
        assert (dry["verdict"], dry["critical_hits"]) == ("prompt", ["rm-recursive-root-or-home"])
        held = agent.post(
            "/v1/executions", json={"command": command, "env": {"HOME": "/"}, "async": True}
        ).json()
        assert held["state"] == "awaiting_approval", held
        assert agent.post(f"/v1/executions/{held['id']}/cancel").status_code == 200
        session = agent.post("/v1/sessions", json={"env": {"HOME": "/"}}).json()["id"]
        in_session = agent.post(
            "/v1/executions", json={"command": command, "session": session, "async": True}
        ).json()
        assert in_session["state"] == "awaiting_approval", in_session
        assert agent.post(f"/v1/executions/{in_session['id']}/cancel").status_code == 200
        agent.delete(f"/v1/sessions/{session}")
        plain = agent.post("/v1/policy/evaluate", json={"command": command}).json()
        assert plain["verdict"] == "allow"


def test_a_cd_through_cdpath_may_lead_anywhere_for_the_critical_patterns(
    env_server: LiveServer,
) -> None:
    """With `CDPATH=/` bash's `cd etc` goes to `/etc`; it was judged as `<cwd>/etc`.
    `false &&` keeps the submitted commands from ever running."""
    command = "true; cd etc && false && rm -rf ."
    with env_server.client(AGENT) as agent:
        for body in (
            {"command": command, "env": {"CDPATH": "/"}},
            {"command": f"export CDPATH=/; {command}"},
        ):
            _held_as_critical(agent, body)
        plain = agent.post("/v1/policy/evaluate", json={"command": command}).json()
        assert plain["verdict"] == "allow"


def _held_as_critical(agent: httpx.Client, body: dict[str, Any]) -> None:
    """The dry run flags `rm -rf` of a precious directory, and the submit waits for approval
    (withdrawn at once: nothing runs)."""
    dry = agent.post("/v1/policy/evaluate", json=body).json()
    assert (dry["verdict"], dry["critical_hits"]) == ("prompt", ["rm-recursive-root-or-home"]), dry
    held = agent.post("/v1/executions", json={**body, "async": True}).json()
    assert held["state"] == "awaiting_approval", held
    assert agent.post(f"/v1/executions/{held['id']}/cancel").status_code == 200
