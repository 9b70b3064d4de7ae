"""The reader against issue 28's families of bypasses and the everyday-commands corpus
(tests/reader_corpus.py). Pure: nothing is executed here."""

from __future__ import annotations

import pytest

from app.policy.engine import PolicyDocument, RuleAction, evaluate
from app.policy.shell.syntax import env_scripts, read_command
from tests.policy_corpus import BENIGN_COMMANDS
from tests.reader_corpus import BYPASS_FAMILIES, BYPASS_FORMS, EVERYDAY_EXTRA, READER_POLICY

POLICY = PolicyDocument.model_validate(READER_POLICY)
# Everyday commands: the benign corpus (less what `rm *` rightly denies) and the extra ones.
EVERYDAY = list(
    dict.fromkeys(
        [c for c in BENIGN_COMMANDS if "rm " not in c and not c.startswith("rm")] + EVERYDAY_EXTRA
    )
)


def test_corpora_have_the_promised_sizes() -> None:
    assert len(BYPASS_FORMS) == len(set(BYPASS_FORMS)) >= 90
    assert len(BYPASS_FAMILIES) == 8
    assert len(EVERYDAY) >= 200


@pytest.mark.parametrize("command", BYPASS_FORMS)
def test_each_bypass_form_is_caught(command: str) -> None:
    verdict = evaluate(POLICY, command)
    assert verdict.approval is not RuleAction.allow, (command, verdict)


@pytest.mark.parametrize("command", EVERYDAY)
def test_each_everyday_command_stays_allowed_and_readable(command: str) -> None:
    verdict = evaluate(POLICY, command)
    assert verdict.approval is RuleAction.allow, (command, verdict)
    assert verdict.unreadable_reasons == [], (command, verdict)


@pytest.mark.parametrize(
    ("command", "segment"),
    [
        ("unshare -S 0 forbidden x", "forbidden x"),
        ("setarch x86_64 -R forbidden x", "forbidden x"),
        ("$'forbidden\\x00tail' y", "forbidden y"),
        ("for n do forbidden x; done", "forbidden x"),
        ("su root <<< 'forbidden x'", "forbidden x"),
        ("sg root 'forbidden x'", "forbidden x"),
        ("env -iS 'forbidden x'", "forbidden x"),
        ("rsync -e 'forbidden x' a b:c", "forbidden x"),
        ("ssh -oProxyCommand='forbidden x' host", "forbidden x"),
        ("tar -xf a.tar --to-command='forbidden x'", "forbidden x"),
        ("git -c diff.external='forbidden x' diff", "forbidden x"),
        ("parallel ::: 'forbidden x'", "forbidden x"),
    ],
)
def test_what_a_wrapper_or_program_runs_is_read_as_a_segment(command: str, segment: str) -> None:
    assert segment in read_command(command).segments


@pytest.mark.parametrize(
    "command",
    [
        "printf 'forb%s x' idden | bash",
        "base64 -d <<< Zm9yYmlkZGVuIHgK | bash",
        "cat notes.txt | sh",
        "printf -v PS4 '%s(x)' '$'; set -x",
        "bash --rcfile <(echo x) -ic true",
        "printf -v x 'a[%s(cmd)]' '$'; echo ${!x}",
        "declare -n hh=BASH_CMDS",
        "exec 3< <(echo x); bash <&3",
        "printf 'x%s' y | su root",
        "read PS4 <<< '$(x)'; set -x",
        "[[ -v $x ]] ; x=$(date)",
    ],
)
def test_text_that_cannot_be_read_is_unreadable(command: str) -> None:
    assert read_command(command).unreadable, command


def test_an_argument_that_looks_like_an_assignment_assigns_nothing() -> None:
    assert read_command('echo "PAGER=$PAGER"').unreadable == ()
    assert read_command("PAGER=$(x) git log").unreadable != ()


def test_git_config_values_in_a_request_env_are_read_as_scripts() -> None:
    assert env_scripts({"GIT_CONFIG_VALUE_0": "forbidden x", "HOME": "/h"}) == ["forbidden x"]
    parameters = "'user.name=Ann Lee' 'alias.x=!forbidden x'"
    assert env_scripts({"GIT_CONFIG_PARAMETERS": parameters}) == ["Ann Lee", "forbidden x"]


def test_env_assigns_for_its_command_but_an_option_value_assigns_nothing() -> None:
    assert "forbidden x" in read_command("env -C /tmp PAGER='forbidden x' git log").segments
    assert (
        "forbidden x git log" not in read_command("env -S \"PAGER='forbidden x' git log\"").segments
    )  # -S's value is split and read as env's command, not as a value
    assert read_command("env PAGER=$x git log").unreadable != ()


@pytest.mark.parametrize(
    "command",
    [
        'rm -rf "${HOME%/}"',
        "rm -rf ${HOME#x}",
        "cd -P /proc/self/root && rm -rf .",
        "rm -rf /proc/1/root/",
    ],
)
def test_critical_spellings_of_home_and_root_are_escalated(command: str) -> None:
    assert evaluate(POLICY, command).critical_hits, command
