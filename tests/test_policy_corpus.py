"""The policy engine against its corpora (tests/policy_corpus.py) and hypothesis properties.

Pure: nothing is executed here; tests/api/test_policy_bypass.py runs the bypass corpus against a
real server with a harmless marker command.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.policy.engine import PolicyDocument, RuleAction, evaluate
from tests.policy_corpus import (
    BENIGN_COMMANDS,
    BYPASS_FORMS,
    CRITICAL_SPELLINGS,
    CRITICAL_WITH_CWD,
    MARKER_COMMAND,
    REALISTIC_POLICY,
)

REALISTIC = PolicyDocument.model_validate(REALISTIC_POLICY)
REALISTIC_UNREADABLE_DENY = PolicyDocument.model_validate(REALISTIC_POLICY | {"unreadable": "deny"})
ALLOW_ALL = PolicyDocument.model_validate({"rules": [{"match": "*", "approval": "allow"}]})


def test_corpora_have_the_promised_sizes() -> None:
    assert len(BYPASS_FORMS) >= 150
    assert len(set(BYPASS_FORMS)) == len(BYPASS_FORMS)
    assert len(BENIGN_COMMANDS) >= 100
    assert len(set(BENIGN_COMMANDS)) == len(BENIGN_COMMANDS)
    assert len(CRITICAL_SPELLINGS) >= 73
    assert len(REALISTIC.rules) == 20


@pytest.mark.parametrize("command", BYPASS_FORMS)
def test_bypass_form_is_never_allowed(command: str) -> None:
    verdict = evaluate(REALISTIC, command)
    assert verdict.approval is not RuleAction.allow, (command, verdict)


@pytest.mark.parametrize("command", BYPASS_FORMS)
def test_bypass_form_is_denied_when_unreadable_is_deny(command: str) -> None:
    verdict = evaluate(REALISTIC_UNREADABLE_DENY, command)
    assert verdict.approval is RuleAction.deny, (command, verdict)


def test_benign_corpus_has_no_false_prompts() -> None:
    prompted = {
        command: evaluate(REALISTIC, command).reason
        for command in BENIGN_COMMANDS
        if evaluate(REALISTIC, command).approval is not RuleAction.allow
    }
    rate = len(prompted) / len(BENIGN_COMMANDS)
    assert rate == 0, f"false-prompt rate {rate:.1%}: {prompted}"


@pytest.mark.parametrize(
    "command",
    [
        "ls -la",
        "python3 -m pytest -q",
        "for i in 1 2 3; do echo $i; done",
        'echo "$HOME"',
        "grep -rn foo .",
    ],
)
def test_literal_command_names_stay_allowed_and_readable(command: str) -> None:
    verdict = evaluate(REALISTIC, command)
    assert verdict.approval is RuleAction.allow
    assert verdict.unreadable_reasons == []


@pytest.mark.parametrize("command", CRITICAL_SPELLINGS)
def test_every_critical_spelling_is_escalated(command: str) -> None:
    verdict = evaluate(ALLOW_ALL, command)
    assert verdict.critical_hits, command
    assert (verdict.approval, verdict.reason) == (RuleAction.prompt, "Critical pattern detected")


@pytest.mark.parametrize(("command", "cwd"), CRITICAL_WITH_CWD)
def test_critical_patterns_are_judged_against_the_effective_cwd(command: str, cwd: str) -> None:
    assert evaluate(ALLOW_ALL, command, cwd=cwd).approval is RuleAction.prompt
    assert evaluate(ALLOW_ALL, command, cwd="/srv/project/build").approval is RuleAction.allow


@pytest.mark.parametrize(
    "command",
    [
        # The segments hold `cd ..` once: the second climb went unseen, `/` read as /srv.
        "cd .. && cd .. && rm -rf .",
        "for i in 1 2 3; do cd ..; done; rm -rf .",
        "pushd / && rm -rf .",
        "cd / && cd /tmp && cd - && rm -rf .",
        "pushd /etc; pushd /tmp; popd; rm -rf .",
        "cd $(echo /) && rm -rf .",
        "x=/; cd $x && rm -rf -- *",
        "cd && rm -rf .",
        'cd / && rm -rf "$PWD"',
        "rm -rf ${HOME:?}",
        'rm -rf "${HOME:?}/"',
        "rm -rf ${HOME:-/tmp}/*",
        "echo x >| /etc/passwd",
        "echo x >& /etc/shadow",
        "cat image >| /dev/sda",
    ],
)
def test_critical_patterns_follow_every_way_the_directory_moves(command: str) -> None:
    verdict = evaluate(ALLOW_ALL, command, cwd="/srv/project")
    assert verdict.critical_hits, command
    assert (verdict.approval, verdict.reason) == (RuleAction.prompt, "Critical pattern detected")


@pytest.mark.parametrize(
    "command",
    [
        "cd .. && rm -rf build",
        "cd ../.. && rm -rf node_modules",
        "cd build && cd build && rm -rf .",
        "pushd /tmp; popd; rm -rf build",
        'cd "$d" && rm -rf build',
        "cd ~ && rm -rf build",
        'rm -rf "$PWD/build"',
    ],
)
def test_moving_about_below_the_precious_directories_stays_allowed(command: str) -> None:
    verdict = evaluate(ALLOW_ALL, command, cwd="/srv/project")
    assert (verdict.approval, verdict.critical_hits) == (RuleAction.allow, [])


def test_unreadable_verdict_names_why() -> None:
    verdict = evaluate(REALISTIC, "x=launchmissiles; $x")
    assert verdict.approval is RuleAction.prompt
    assert verdict.reason == "Unreadable command: command name built by expansion: $x"
    assert verdict.unreadable_reasons == ["command name built by expansion: $x"]


def test_unreadable_is_ignored_by_a_policy_with_nothing_to_hide_from() -> None:
    assert evaluate(PolicyDocument(), "x=ls; $x").approval is RuleAction.allow


def test_unreadable_allow_must_be_chosen_explicitly() -> None:
    permissive = PolicyDocument.model_validate(REALISTIC_POLICY | {"unreadable": "allow"})
    assert evaluate(permissive, "x=ls; $x").approval is RuleAction.allow


def test_a_limit_of_the_unwrapper_never_allows() -> None:
    # Far beyond any work budget: the reader gives up, and giving up is not allowing.
    command = "env nice timeout 5 " * 1000 + "launchmissiles"
    verdict = evaluate(
        PolicyDocument.model_validate(REALISTIC_POLICY | {"unreadable": "allow"}), command
    )
    assert verdict.approval is not RuleAction.allow


# --- properties ------------------------------------------------------------------------------

_SHELL_ALPHABET = st.sampled_from(
    [
        *list("abcxyz019 \t\n;&|<>()[]{}$`'\"\\!#*?=~-_./,:%^"),
        "$(",
        "<(",
        ">(",
        "<<",
        "<<'E'\n",
        "\nE\n",
        "${",
        "$((",
        "))",
        "&&",
        "||",
        "bash -c ",
        "eval ",
    ]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_SHELL_ALPHABET, max_size=120).map("".join))
def test_any_input_is_judged_without_crash(command: str) -> None:
    verdict = evaluate(REALISTIC, command)
    assert verdict.approval in RuleAction


_WRAPPERS = [
    "timeout 5 {}",
    "env {}",
    "env A=1 {}",
    "env -i {}",
    "nohup {}",
    "nice -n 5 {}",
    "time {}",
    "command {}",
    "builtin {}",
    "exec {}",
    "A=1 {}",
    "stdbuf -oL {}",
    "setsid {}",
    "ionice -c 3 {}",
    "chrt -o 0 {}",
    "taskset 1 {}",
    "flock /tmp/x.lock {}",
    "unbuffer {}",
    "xargs {}",
    "sudo -u root {}",
    "/usr/bin/env {}",
]
_GROUPINGS = ["( {} )", "{{ {}; }}", "echo $( {} )", "true && {}", "false || {}"]
_GROUPINGS += ["echo | {}", "if true; then {}; fi", "f() {{ {}; }}; f", "coproc N {{ {}; }}"]
_QUOTED_RUNNERS = ["bash -c {}", "sh -c {}", "eval {}", "script -qc {} /dev/null", "su -c {}"]
_QUOTED_RUNNERS += ["trap {} EXIT", "flock /tmp/x.lock -c {}", "watch {}"]


def _single_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


@st.composite
def _respelled(draw: st.DrawFn, word: str) -> str:
    """`word` split into pieces, each quoted in a way bash reads back as the same characters."""
    pieces: list[str] = []
    i = 0
    while i < len(word):
        size = draw(st.integers(min_value=1, max_value=len(word) - i))
        piece = word[i : i + size]
        i += size
        style = draw(st.sampled_from(["plain", "single", "double", "ansi", "hex", "backslash"]))
        if style == "single":
            pieces.append(f"'{piece}'")
        elif style == "double":
            pieces.append(f'"{piece}"')
        elif style == "ansi":
            pieces.append(f"$'{piece}'")
        elif style == "hex":
            pieces.append("$'" + "".join(f"\\x{ord(ch):02x}" for ch in piece) + "'")
        elif style == "backslash":
            pieces.append("".join(f"\\{ch}" for ch in piece))
        else:
            pieces.append(piece)
    return "".join(pieces)


@st.composite
def _hidden_marker(draw: st.DrawFn) -> str:
    command = draw(_respelled(MARKER_COMMAND)) + draw(st.sampled_from(["", " --now", " x y"]))
    for _ in range(draw(st.integers(min_value=0, max_value=5))):
        kind = draw(st.sampled_from(["wrap", "wrap", "group", "quote", "backtick"]))
        if kind == "backtick":
            # Inside backticks `\`, `$` and backticks are escaped so bash reads the text back.
            escaped = "".join(f"\\{ch}" if ch in "\\`$" else ch for ch in command)
            command = f"echo `{escaped}`"
        elif kind == "wrap":
            command = draw(st.sampled_from(_WRAPPERS)).format(command)
        elif kind == "group":
            command = draw(st.sampled_from(_GROUPINGS)).format(command)
        else:
            command = draw(st.sampled_from(_QUOTED_RUNNERS)).format(_single_quote(command))
    return command


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_hidden_marker())
def test_a_denied_command_stays_denied_under_any_wrapping_grouping_and_quoting(
    command: str,
) -> None:
    verdict = evaluate(REALISTIC, command)
    assert verdict.approval is RuleAction.deny, (command, verdict)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=1, max_value=200), st.sampled_from(_WRAPPERS))
def test_any_height_of_one_wrapper_stays_denied(height: int, wrapper: str) -> None:
    command = MARKER_COMMAND
    for _ in range(height):
        command = wrapper.format(command)
    assert evaluate(REALISTIC, command).approval is RuleAction.deny
