"""The pure env rules (`app/policy/env_rules.py`): globs, the default list, the judgement."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from app.core.errors import InvalidRequestError
from app.policy.env_rules import (
    DEFAULT_ENV_DENY,
    EnvRules,
    glob_matches_name,
    judge_env,
    validate_env,
)
from app.policy.shell.embedded import CODE_VARIABLE_NAMES, env_scripts

NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,30}", fullmatch=True)
GLOBS = st.from_regex(r"[A-Za-z0-9_*]{1,12}", fullmatch=True)


@pytest.mark.parametrize(
    ("glob", "name", "matches"),
    [
        ("PATH", "PATH", True),
        ("PATH", "PATHX", False),
        ("PATH", "path", False),
        ("LD_*", "LD_PRELOAD", True),
        ("LD_*", "LD_", True),
        ("LD_*", "OLD_PRELOAD", False),
        ("*_PRELOAD", "LD_PRELOAD", True),
        ("A*B*C", "AxxBxxC", True),
        ("A*B*C", "ACB", False),
        ("A*A", "A", False),
        ("*", "ANYTHING", True),
    ],
)
def test_a_glob_matches_the_whole_name_with_star_as_any_run(
    glob: str, name: str, matches: bool
) -> None:
    assert glob_matches_name(glob, name) is matches


@given(GLOBS, NAMES)
def test_glob_matching_agrees_with_an_anchored_regex(glob: str, name: str) -> None:
    regex = ".*".join(re.escape(part) for part in glob.split("*"))
    assert glob_matches_name(glob, name) is bool(re.fullmatch(regex, name))


def test_a_pathological_glob_is_matched_correctly() -> None:
    # A backtracking regex would take ages on these; the matcher scans each name once
    # (bench_policy's `hostile_inputs` times it).
    glob = "*A" * 30 + "*B"
    assert glob_matches_name(glob, "A" * 100_000) is False
    assert glob_matches_name(glob, "A" * 100_000 + "B") is True
    assert glob_matches_name("*A*A*A*C", "A" * 100_000 + "B") is False


def test_the_default_rules_deny_the_documented_names_and_prompt_for_none() -> None:
    rules = EnvRules()
    assert rules.deny == list(DEFAULT_ENV_DENY)
    assert rules.prompt == []
    for name in ("BASH_ENV", "BASH_FUNC_ls", "LD_PRELOAD", "LD_AUDIT", "PATH", "PS4", "IFS"):
        assert judge_env(rules, [name]).action == "deny", name
    for name in ("HOME_DIR", "GREETING", "path", "LDX", "MY_PATH"):
        assert judge_env(rules, [name]).action == "allow", name


def test_every_variable_the_reader_runs_as_shell_text_is_denied_by_default() -> None:
    """A request's `env` cannot carry shell text past the default rules (the reader reads it
    too, for an admin's list that lifts a name)."""
    names = [*CODE_VARIABLE_NAMES, "GIT_CONFIG_KEY_0", "GIT_CONFIG_VALUE_12"]
    assert all(
        env_scripts({name: "x"})[:1] == ["x"] for name in names if name != "GIT_CONFIG_PARAMETERS"
    )
    judgement = judge_env(EnvRules(), names)
    assert [verdict.name for verdict in judgement.names if verdict.action != "deny"] == []


def test_deny_wins_over_prompt_and_each_name_is_judged_once_in_order() -> None:
    rules = EnvRules(deny=["SECRET_*"], prompt=["SECRET_*", "AWS_*"])
    judgement = judge_env(rules, ["A", "AWS_KEY", "SECRET_X", "AWS_KEY", "B"])
    assert [(item.name, item.action, item.glob) for item in judgement.names] == [
        ("A", "allow", None),
        ("AWS_KEY", "prompt", "AWS_*"),
        ("SECRET_X", "deny", "SECRET_*"),
        ("B", "allow", None),
    ]
    assert judgement.action == "deny"
    assert judgement.reason == "Blocked environment variable: SECRET_X"


def test_a_prompt_reason_names_every_prompted_variable_and_its_glob() -> None:
    judgement = judge_env(EnvRules(prompt=["AWS_*", "GH_TOKEN"]), ["AWS_A", "X", "GH_TOKEN"])
    assert judgement.action == "prompt"
    assert judgement.reason == (
        "Prompt required for environment variables: AWS_A (AWS_*), GH_TOKEN (GH_TOKEN)"
    )
    assert judge_env(EnvRules(), []).action == "allow"
    assert judge_env(EnvRules(), []).reason == ""


@pytest.mark.parametrize("glob", ["", " ", "A-B", "A B", "A?", "[A]", "A.B", "É"])
def test_a_glob_that_is_not_a_name_pattern_is_refused(glob: str) -> None:
    with pytest.raises(ValidationError):
        EnvRules(deny=[glob])
    with pytest.raises(ValidationError):
        EnvRules(prompt=[glob])


@given(st.dictionaries(NAMES, st.text(max_size=20), max_size=8))
def test_any_denied_name_makes_the_whole_judgement_deny(env: dict[str, str]) -> None:
    judgement = judge_env(EnvRules(), {**env, "BASH_ENV": "x"})
    assert judgement.action == "deny"
    assert "BASH_ENV" in [item.name for item in judgement.named("deny")]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"1X": "v"}, "Invalid bash env name: 1X"),
        ({"A-B": "v"}, "Invalid bash env name: A-B"),
        ({"BASH_FUNC_x%%": "() { :; }"}, "Invalid bash env name: BASH_FUNC_x%%"),
        ({"A": "a\0b"}, "env value of A must not contain a NUL byte"),
    ],
)
def test_validate_env_refuses_names_bash_cannot_have(env: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        validate_env(env)
    assert refused.value.message == message
