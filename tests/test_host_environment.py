"""The host environment a command inherits follows `os.environ` as it changes, although the
filtered copy is kept between calls, and leaves out what the inheritance settings say
(app/process/environment.py, docs/api.md#the-process)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.core.config import Settings
from app.process.environment import Inheritance, host_environment, inheritance_of

DEFAULT = Inheritance()


def test_a_change_to_the_process_environment_shows_in_the_next_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOST_ENV_PROBE", "one")
    assert host_environment(DEFAULT)["HOST_ENV_PROBE"] == "one"
    monkeypatch.setenv("HOST_ENV_PROBE", "two")
    assert host_environment(DEFAULT)["HOST_ENV_PROBE"] == "two"
    monkeypatch.delenv("HOST_ENV_PROBE")
    assert "HOST_ENV_PROBE" not in host_environment(DEFAULT)


def test_the_servers_own_variables_and_shell_noise_are_left_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SHELLGATE_TOKENS", "a:agent:secret")
    monkeypatch.setenv("PS1", "$ ")
    env = host_environment(DEFAULT)
    assert "SHELLGATE_TOKENS" not in env and "PS1" not in env


def test_each_call_gets_a_dict_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOST_ENV_PROBE", "kept")
    first = host_environment(DEFAULT)
    first["HOST_ENV_PROBE"] = "changed by a caller"
    first["ADDED_BY_A_CALLER"] = "x"
    second = host_environment(DEFAULT)
    assert second["HOST_ENV_PROBE"] == "kept" and "ADDED_BY_A_CALLER" not in second


def test_an_explicit_source_is_filtered_the_same_way() -> None:
    env = host_environment(DEFAULT, {"A": "1", "SHELLGATE_X": "2", "_": "3"})
    assert env == {"A": "1"}


CREDENTIAL_NAMES = (
    "OPENAI_API_KEY",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "GH_TOKEN",
    "npm_token",
    "PGPASSWORD",
    "MYSQL_PWD",
    "REDIS_PASSWD",
    "GPG_PASSPHRASE",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "NPM_CONFIG__AUTH",
    "SSH_AUTH_SOCK",
    "DATABASE_URL",
    "SENTRY_DSN",
    "GITHUB_PAT",
    "AZURE_DEVOPS_EXT_PAT",
    "GH_PAT_FOR_CI",
    "SLACK_WEBHOOK_URL",
    "DISCORD_WEBHOOK",
    "SESSION_COOKIE",
    "GPG_AGENT_INFO",
)
ORDINARY_NAMES = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "JAVA_HOME",
    "VIRTUAL_ENV",
    "XAUTHORITY",
    "PYTHONPATH",
    "PATHEXT",
    "MANPATH",
    "PATCH_LEVEL",
)


@pytest.mark.parametrize("name", CREDENTIAL_NAMES)
def test_a_credential_is_not_inherited_by_default(name: str) -> None:
    assert host_environment(DEFAULT, {name: "x"}) == {}


@pytest.mark.parametrize("name", ORDINARY_NAMES)
def test_an_ordinary_variable_is_inherited_by_default(name: str) -> None:
    assert host_environment(DEFAULT, {name: "x"}) == {name: "x"}


@pytest.mark.parametrize(
    "value",
    [
        "redis://:s3cret@cache:6379/0",
        "http://proxy-user:s3cret@proxy.internal:3128",
        "amqp://app:s3cret@broker/vhost",
        "postgresql+psycopg://app:s3cret@db/app?sslmode=require",
    ],
)
def test_a_url_with_a_password_is_not_inherited_under_any_name(value: str) -> None:
    assert host_environment(DEFAULT, {"CACHE": value}) == {}
    assert host_environment(Inheritance(passed=("CACHE",)), {"CACHE": value}) == {"CACHE": value}


@pytest.mark.parametrize(
    "value",
    [
        "http://proxy.internal:3128",
        "https://user@example.com/path",
        "git@github.com:org/repo.git",
        "/usr/bin:/bin",
        "https://example.com/a:b@c",
    ],
)
def test_a_url_without_a_password_is_inherited(value: str) -> None:
    assert host_environment(DEFAULT, {"PLACE": value}) == {"PLACE": value}


def test_core_keeps_a_shells_own_variables_and_a_passed_name_goes_through_anything() -> None:
    source = {"PATH": "/bin", "LC_TIME": "C", "JAVA_HOME": "/j", "GH_TOKEN": "t", "NPM_TOKEN": "n"}
    core = Inheritance("core", passed=("gh_token",))
    assert host_environment(core, source) == {"PATH": "/bin", "LC_TIME": "C", "GH_TOKEN": "t"}
    nothing = Inheritance("none", passed=("JAVA_*",))
    assert host_environment(nothing, source) == {"JAVA_HOME": "/j"}
    everything = Inheritance("all", exclude=())
    assert host_environment(everything, source) == source


def test_the_servers_own_settings_pass_under_no_setting() -> None:
    opened = Inheritance("all", exclude=(), passed=("*",))
    assert host_environment(opened, {"SHELLGATE_TOKENS": "a:admin:s", "A": "1"}) == {"A": "1"}


def test_another_inheritance_is_not_served_the_copy_kept_for_the_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOST_ENV_TOKEN", "secret")
    assert "HOST_ENV_TOKEN" not in host_environment(DEFAULT)
    assert host_environment(Inheritance(passed=("HOST_ENV_TOKEN",)))["HOST_ENV_TOKEN"] == "secret"
    assert "HOST_ENV_TOKEN" not in host_environment(DEFAULT)


def test_the_settings_split_the_globs_and_refuse_what_is_no_name() -> None:
    settings = Settings(
        _env_file=None,
        command_env_inherit="core",
        command_env_exclude="",
        command_env_pass=" GITHUB_TOKEN , AWS_* ",
    )
    assert inheritance_of(settings) == Inheritance("core", (), ("GITHUB_TOKEN", "AWS_*"))
    assert inheritance_of(Settings(_env_file=None)) == DEFAULT
    with pytest.raises(ValidationError, match="is not a variable name glob"):
        Settings(_env_file=None, command_env_pass="GITHUB TOKEN")
    with pytest.raises(ValidationError):
        Settings(_env_file=None, command_env_inherit="some")
