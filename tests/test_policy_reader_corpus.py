"""The reader against issue 28's families of bypasses and the everyday-commands corpus
(tests/reader_corpus.py). Pure: nothing is executed here."""

from __future__ import annotations

import shlex

import pytest

from app.policy.engine import PolicyDocument, RuleAction, evaluate
from app.policy.env_rules import DEFAULT_ENV_DENY
from app.policy.shell.embedded import OPTION_VARIABLES
from app.policy.shell.syntax import env_scripts, read_command
from app.policy.shell.wrappers import ASSIGNMENT_WORD
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
    assert len(BYPASS_FORMS) == len(set(BYPASS_FORMS)) >= 430
    assert len(BYPASS_FAMILIES) == 9
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
        # A `-c` value attached to its option, alone or ending a cluster (getopt reads both).
        ("su -c'forbidden x'", "forbidden x"),
        ("su root -c'forbidden x'", "forbidden x"),
        ("su -lc'forbidden x'", "forbidden x"),
        ("runuser -c'forbidden x'", "forbidden x"),
        ("script -qc'forbidden x' /dev/null", "forbidden x"),
        ("script -c'forbidden x'", "forbidden x"),
        # Options that run shell text or a program, loaders and small runners.
        ("split -l 1 --filter='forbidden x' f", "forbidden x"),
        ("make SHELL=forbidden all", "forbidden"),
        ("npm test --script-shell=forbidden", "forbidden"),
        ("/lib64/ld-linux-x86-64.so.2 /usr/bin/forbidden x", "forbidden x"),
        ("/lib/ld-musl-x86_64.so.1 --preload a.so forbidden x", "forbidden x"),
        ("coreutils --coreutils-prog=forbidden x", "forbidden x"),
        ("toybox forbidden x", "forbidden x"),
        ("sshpass -p pw forbidden x", "forbidden x"),
        ("eatmydata forbidden x", "forbidden x"),
        ("chronic -e forbidden x", "forbidden x"),
        ("ifne forbidden x", "forbidden x"),
        ("tini -s -- forbidden x", "forbidden x"),
        ("dumb-init forbidden x", "forbidden x"),
        ("chpst -u nobody forbidden x", "forbidden x"),
        ("setuidgid nobody forbidden x", "forbidden x"),
        ("envdir ./env forbidden x", "forbidden x"),
        ("softlimit -m 1000 forbidden x", "forbidden x"),
        ("nocache forbidden x", "forbidden x"),
        ("runcon ctx forbidden x", "forbidden x"),
        ("runcon -t t forbidden x", "forbidden x"),
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
    env = {"GIT_CONFIG_KEY_0": "core.pager", "GIT_CONFIG_VALUE_0": "forbidden x", "HOME": "/h"}
    assert "forbidden x" in env_scripts(env)
    assert "git forbidden x" not in env_scripts(env)  # a pager's value is no alias
    # Without its key (the command may set it), a value is read as an alias's arguments too.
    assert env_scripts({"GIT_CONFIG_VALUE_0": "forbidden x"}) == ["forbidden x", "git forbidden x"]
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


# Names on the default env deny list whose value is not shell text the reader could read: a
# file, a library, a list, a setting of the shell or an interpreter's (why each is denied:
# docs/policy.md#environment-variables; in a command's text the command rules judge them as text).
NAMES_JUDGED_BY_NAME_ONLY = {
    "BASH_ENV",
    "ENV",
    "SHELLOPTS",
    "BASHOPTS",
    "IFS",
    "PATH",
    "LD_*",
    "GCONV_PATH",
    "PYTHONSTARTUP",
    "PERL5OPT",
    "NODE_OPTIONS",
    "RUBYOPT",
    "GIT_CONFIG_COUNT",
    "GIT_CONFIG_KEY_*",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_EXEC_PATH",
    "GIT_TEMPLATE_DIR",
}
# A value that runs `forbidden x`, for the names whose value a program reads as options.
_OPTION_VALUES = {
    "TAR_OPTIONS": "--to-command='forbidden x'",
    "ZIPOPT": "-T -TT 'forbidden x'",
    "MANOPT": "-P 'forbidden x'",
    "PARALLEL": "--ssh 'forbidden x'",
}


def _running_value(name: str) -> str:
    if name in _OPTION_VALUES:
        return _OPTION_VALUES[name]
    if name.startswith("BASH_FUNC_"):
        return "() { forbidden x; }"
    return "forbidden x"


def _concrete(glob: str) -> str:
    return glob.replace("BASH_FUNC_*", "BASH_FUNC_f%%").replace("*", "0")


@pytest.mark.parametrize(
    "glob", [glob for glob in DEFAULT_ENV_DENY if glob not in NAMES_JUDGED_BY_NAME_ONLY]
)
def test_each_default_denied_env_name_that_runs_its_value_is_read_in_text_and_env(
    glob: str,
) -> None:
    # The class: a name the env rules deny because a program runs its value is read as what
    # it runs, assigned in the command's text (by `env`, `export`, before the command) and in a
    # request's `env` field alike; a name added to the list must be read, or listed above.
    name, value = _concrete(glob), _running_value(_concrete(glob))
    quoted = shlex.quote(f"{name}={value}")
    texts = [f"env {quoted} true"]
    if ASSIGNMENT_WORD.fullmatch(name + "="):
        texts += [f"export {quoted}; true", f"{quoted} true", f"declare -x {quoted}; true"]
    for text in texts:
        assert evaluate(POLICY, text).approval is RuleAction.deny, text
    through_env = evaluate(POLICY, "true", scripts=env_scripts({name: value}))
    if name.startswith("BASH_FUNC_"):  # an env field name cannot hold `%` (422 before this)
        return
    assert through_env.approval is RuleAction.deny, name


def test_the_option_variables_are_on_the_default_deny_list() -> None:
    assert set(OPTION_VARIABLES) - set(DEFAULT_ENV_DENY) == set()


@pytest.mark.parametrize(
    "command",
    [
        "TAR_OPTIONS=--no-same-owner tar xf a.tar",
        "ZIPOPT=-q zip -r a.zip src",
        "export TAR_OPTIONS=--warning=no-unknown-keyword",
        'echo "TAR_OPTIONS=$TAR_OPTIONS"',
    ],
)
def test_an_options_variable_that_runs_nothing_stays_allowed(command: str) -> None:
    verdict = evaluate(POLICY, command)
    assert verdict.approval is RuleAction.allow, verdict
    assert verdict.unreadable_reasons == []


def test_an_options_variable_built_by_expansion_is_unreadable() -> None:
    assert read_command('TAR_OPTIONS="$opts" tar xf a.tar').unreadable != ()


# --- where tree-sitter-bash's tree disagrees with bash (review of the tree reader) ----------
# Each form ran the denied program in bash while the grammar's tree hid it; compared with real
# bash and a harmless `forbidden` on PATH. The reader must read what bash runs, or fail closed.
BUILT_IN = PolicyDocument()


@pytest.mark.parametrize(
    ("command", "segment"),
    [
        ("true\n\\forbidden x", "forbidden x"),
        ("echo a\n\\rm -f x", "rm -f x"),
        ("echo a # c\n\\f\\orbidden x", "forbidden x"),
        ("X=1\n\\forbidden x", "forbidden x"),
        ("export a\n\\forbidden x", "forbidden x"),
        ("true \\\n\n\\forbidden x", "forbidden x"),
        ("if true\n\\forbidden x\nthen :; fi", "forbidden x"),
        # The grammar also takes such a line for more targets of a redirect.
        ("echo a > f\n\\forbidden x", "forbidden x"),
        ("cat < f\n\\forbidden x", "forbidden x"),
        ("echo a <<< x\n\\forbidden x", "forbidden x"),
    ],
)
def test_a_line_starting_with_an_escaped_word_is_a_command_of_its_own(
    command: str, segment: str
) -> None:
    # The grammar joins `⏎\word` to the command above; bash ends that command at the newline.
    assert segment in read_command(command).segments
    assert evaluate(POLICY, command).approval is RuleAction.deny


@pytest.mark.parametrize(
    "command",
    ["true\n\\shutdown -h now", "true\n\\find / -delete", "true\n\\cd / && rm -rf *"],
)
def test_a_critical_command_on_a_line_starting_with_a_backslash_is_escalated(
    command: str,
) -> None:
    verdict = evaluate(BUILT_IN, command)
    assert verdict.approval is RuleAction.prompt and verdict.critical_hits, verdict


def test_a_line_continuation_between_words_still_joins_them() -> None:
    # The check for joined lines must not split what a backslash-newline really continues.
    assert read_command("echo a \\\n  b\\\n\\c").segments == ("echo a bc",)


@pytest.mark.parametrize(
    "command",
    [
        "true \\\r\nforbidden x",
        "echo a\\\\\r\nforbidden x",
        "bash -c $'true \\\\\\r\\nforbidden x'",
    ],
)
def test_a_backslash_before_crlf_escapes_the_cr_and_the_newline_ends_the_command(
    command: str,
) -> None:
    # Bash reads `\<CR>` as a literal CR: the LF after it is no line continuation.
    assert "forbidden x" in read_command(command).segments
    assert evaluate(POLICY, command).approval is RuleAction.deny


@pytest.mark.parametrize("opening", ["$((", "$((1", "${x:-", "${x/", "${x#", "${x:=", "${x%%"])
def test_a_here_doc_ends_at_its_first_delimiter_line_even_inside_an_open_expansion(
    opening: str,
) -> None:
    # The grammar reads the body on to the second `EOF` while the expansion is open; bash ends
    # it at the first and runs `forbidden x`, so that line must be judged (here, as text the
    # reader cannot parse, which still matches the deny rule).
    command = f"cat <<EOF\n{opening}\nEOF\nforbidden x\n}}))\nEOF"
    assert "forbidden x" in read_command(command).segments
    assert evaluate(POLICY, command).approval is RuleAction.deny


def test_a_critical_command_after_an_overrun_here_doc_is_escalated() -> None:
    command = "cat <<-EOF\n$((\n\tEOF\ncd / && rm -rf *\n))\nEOF"
    verdict = evaluate(BUILT_IN, command)
    assert verdict.approval is RuleAction.prompt and verdict.critical_hits, verdict


@pytest.mark.parametrize(
    "command",
    [
        "echo ${x:-`forbidden x`}",
        'echo "${x-`forbidden x`}"',
        "echo ${x:=`forbidden x`}",
        "echo ${x-`forbidden x`}",
        "echo ${x/`forbidden x`/b}",
    ],
)
def test_a_backtick_substitution_that_is_a_whole_expansion_word_is_read(command: str) -> None:
    # The grammar gives these backticks as a plain word; bash runs them when `x` is unset.
    assert "forbidden x" in read_command(command).segments
    assert evaluate(POLICY, command).approval is RuleAction.deny


@pytest.mark.parametrize(
    "command",
    [
        "at -f /dev/stdin now <<< 'forbidden x'",
        "at now -f /dev/fd/0 <<EOF\nforbidden x\nEOF",
        "at -f/proc/self/fd/0 now <<< 'forbidden x'",
        "at -f - now <<< 'forbidden x'",
        "batch -f /dev/stdin <<< 'forbidden x'",
    ],
)
def test_a_job_file_naming_stdin_is_the_job_on_stdin(command: str) -> None:
    # `at -f FILE` reads the job from FILE; /dev/stdin is the here-string, as with plain `at`.
    assert "forbidden x" in read_command(command).segments
    assert evaluate(POLICY, command).approval is RuleAction.deny


def test_a_crontab_read_from_dev_stdin_is_judged_like_crontab_dash() -> None:
    # Its lines are read as commands; the schedule's `*` makes the line a glob: a prompt.
    command = "echo '* * * * * forbidden x' | crontab /dev/stdin"
    assert "* * * * * forbidden x" in read_command(command).segments
    assert evaluate(POLICY, command).approval is not RuleAction.allow


def test_a_job_file_that_is_a_real_file_is_not_read_from_stdin() -> None:
    # The here-string is not the job here, so its words are not read as commands.
    assert "forbidden x" not in read_command("at -f job.sh now <<< 'forbidden x'").segments


@pytest.mark.parametrize(
    ("command", "segment"),
    [
        # tmux joins the words after a command's options into the shell command it runs.
        ("tmux new -d forbidden x", "forbidden x"),
        ("tmux new -s main -d -c /tmp forbidden x", "forbidden x"),
        ("tmux splitw -h -l 30 forbidden x", "forbidden x"),
        ("tmux run 'forbidden x'", "forbidden x"),
        ("tmux respawn-pane -k 'forbidden x'", "forbidden x"),
        ("tmux -L sock new -d 'forbidden x'", "forbidden x"),
        ("tmux -c 'forbidden x'", "forbidden x"),
        ("tmux new -d \\; run 'forbidden x'", "forbidden x"),
    ],
)
def test_the_shell_command_tmux_runs_is_its_words_joined(command: str, segment: str) -> None:
    assert segment in read_command(command).segments
    assert evaluate(POLICY, command).approval is RuleAction.deny


@pytest.mark.parametrize(
    "command",
    [
        "tmux if-shell 'test -f x' ''",
        "tmux display -p '#(date)'",
        "tmux bind-key x run-shell 'make'",
        "tmux send-keys -t main ls Enter",
    ],
)
def test_tmux_forms_that_run_commands_unmodelled_are_unreadable(command: str) -> None:
    verdict = evaluate(POLICY, command)
    assert verdict.approval is RuleAction.prompt and verdict.unreadable_reasons, verdict


@pytest.mark.parametrize(
    "command",
    [
        "tmux if-shell 'forbidden x' ''",
        "tmux bind-key x run-shell 'forbidden x'",
        "tmux send-keys -t main 'forbidden x' Enter",
    ],
)
def test_the_words_of_an_unmodelled_tmux_form_are_still_judged(command: str) -> None:
    # Unreadable alone would only prompt; a denied command among its words is denied.
    assert evaluate(POLICY, command).approval is RuleAction.deny


@pytest.mark.parametrize("command", ["tmux ls", "tmux attach -t main", "tmux new -s dev"])
def test_tmux_commands_that_run_nothing_given_stay_allowed(command: str) -> None:
    verdict = evaluate(POLICY, command)
    assert verdict.approval is RuleAction.allow and not verdict.unreadable_reasons, verdict


@pytest.mark.parametrize(
    "command",
    [
        "echo \"${x:-'$(forbidden x)'}\"",
        "echo \"${x:?'`forbidden x`'}\"",
        "echo \"${x:-${y:+'$(forbidden x)'}}\"",
        "echo \"${x:=a$'$(forbidden x)'b}\"",
        "echo $(( 0 + '$(forbidden x)' ))",
        "echo \"$[ 0 + '$(forbidden x)' ]\"",
        "echo ${a['$(forbidden x)']}",
        "echo \"${a['`forbidden x`']}\"",
    ],
)
def test_a_substitution_between_single_quotes_bash_takes_literally_is_read(command: str) -> None:
    # In arithmetic, in a subscript and in the word of a double-quoted `${x:-…}`, bash takes
    # `'` as a plain character and runs the substitution between the quotes.
    assert "forbidden x" in read_command(command).segments, command


@pytest.mark.parametrize(
    "command",
    [
        "echo \"${x#'$(forbidden x)'}\"",
        "echo \"${x%%'$(forbidden x)'}\"",
    ],
)
def test_single_quotes_that_bash_honours_still_hide_a_substitution(command: str) -> None:
    # The pattern operators (`#`, `%`, `/`) take `'…'` as quoting, so nothing runs (bash
    # 5.2): the reader does not invent a command there. (An unquoted `${x:-'$(…)'}` runs
    # nothing either, but its value is a quoted `$(`, read as any quoted string is, below.)
    assert "forbidden x" not in read_command(command).segments, command


@pytest.mark.parametrize(
    ("command", "segment"),
    [
        ("env --spl='forbidden x'", "forbidden x"),
        ("su --co 'forbidden x'", "forbidden x"),
        ("su --session='forbidden x'", "forbidden x"),
        ("script -q --comm='forbidden x' /dev/null", "forbidden x"),
        ("tar -cf /dev/null --use-compress-prog 'forbidden' f", "forbidden"),
        ("tar -cf /dev/null --checkpoint=1 --checkpoint-act=exec='forbidden x' f", "forbidden x"),
        ("split -l 1 --filt='forbidden x' f", "forbidden x"),
        ("rsync --rs='forbidden x' a b:c", "forbidden x"),
        ("echo 'forbidden x' | sudo --sh", "forbidden x"),
        ("echo 'forbidden x' | sudo --logi", "forbidden x"),
    ],
)
def test_an_abbreviated_long_option_is_read_as_the_option(command: str, segment: str) -> None:
    # getopt_long takes any unique prefix of a long option; an ambiguous one (`--rs`: `--rsh`
    # or `--rsync-path`) is refused by the program, and read here as the option all the same.
    assert segment in read_command(command).segments, command


@pytest.mark.parametrize(
    ("command", "segment"),
    [
        ("tar cIf forbidden /dev/null f", "forbidden"),
        ("tar cfI /dev/null forbidden f", "forbidden"),
        ("tar cbIf 20 forbidden /dev/null f", "forbidden"),
        ("tar cfF a.tar 'forbidden x' f", "forbidden x"),
    ],
)
def test_tar_old_style_letters_take_their_arguments_in_order(command: str, segment: str) -> None:
    # In `tar cIf PROG ARCHIVE`, the first word's letters that take an argument take the words
    # after it in their order: `I` a compression program, `F` an info script, both run.
    assert segment in read_command(command).segments, command


def test_the_archive_that_tar_old_style_f_takes_is_not_run() -> None:
    # `tar cfI forbidden.tar gzip src`: `f` takes the first word (the archive), `I` the next.
    segments = read_command("tar cfI forbidden.tar gzip src").segments
    assert "gzip" in segments
    assert "forbidden.tar" not in segments


@pytest.mark.parametrize(
    "command",
    [
        # An alias without `!` is git's own arguments, `-c` settings included: git runs
        # `git -c alias.y=!… y`, whose alias is shell text.
        "git -c alias.x='-c alias.y=!forbidden y' x",
        "git config alias.x '-c alias.y=!forbidden y'",
        "git config set alias.x '-c alias.y=!forbidden y'",
        "GIT_CONFIG_KEY_0=alias.x GIT_CONFIG_VALUE_0='-c alias.y=!forbidden y' git x",
        "GIT_CONFIG_PARAMETERS=\"'alias.x=-c alias.y=!forbidden y'\" git x",
        "git -c alias.x='-c core.pager=forbidden log' x",
    ],
)
def test_a_git_alias_without_a_bang_is_read_as_git_arguments(command: str) -> None:
    assert evaluate(POLICY, command).approval is RuleAction.deny, command


def test_a_git_alias_of_plain_git_arguments_stays_allowed() -> None:
    verdict = evaluate(POLICY, "git -c alias.lg='log --oneline' lg")
    assert verdict.approval is RuleAction.allow, verdict
    assert verdict.unreadable_reasons == [], verdict
    assert "git log --oneline" in read_command("git -c alias.lg='log --oneline' lg").segments


@pytest.mark.parametrize(
    "command",
    [
        # `${VAR=word}` and `${VAR:=word}` assign VAR as `VAR=word` does, quotes removed:
        # PS4 then runs its `$(…)` under `set -x`.
        "unset PS4; : ${PS4='$(forbidden)'}; set -x; :",
        "PS4=; : ${PS4:=\\$\\(forbidden\\)}; set -x; :",
        "unset PS4; : ${PS4='`forbidden`'}; set -x; :",
        ": ${PROMPT_COMMAND='forbidden x'}",
        # A quoted `$(` in any operand is shell text, as it is in any other word.
        ": ${x='$(forbidden)'}",
        ": ${x:-'$(forbidden)'}",
        ": ${x:+'$(forbidden)'}",
    ],
)
def test_a_quoted_substitution_in_a_parameter_operand_is_read(command: str) -> None:
    assert evaluate(POLICY, command).approval is RuleAction.deny, command


def test_a_variable_bash_runs_set_by_a_default_to_run_time_text_is_unreadable() -> None:
    assert read_command(": ${PS4:=$(cat f)}; set -x; :").unreadable


@pytest.mark.parametrize(
    "command", ["echo ${x:-default} ${HOME:+set} ${y:=3}", ": ${PS4=plain}", "echo ${x//'$'/d}"]
)
def test_parameter_operands_without_code_stay_allowed(command: str) -> None:
    verdict = evaluate(POLICY, command)
    assert verdict.approval is RuleAction.allow, verdict
    assert verdict.unreadable_reasons == [], verdict


@pytest.mark.parametrize(
    "command",
    [
        # A declaring builtin reads `x=\(…\)` as a compound assignment once the backslashes
        # are removed, and runs the substitutions in it (bash: `x=([0]="PWNED")`).
        "declare -a x=\\(\\$\\(forbidden\\)\\)",
        "declare -A x=\\([\\$\\(forbidden\\)]=1\\)",
        "local -a x=\\(\\$\\(forbidden\\)\\)",
        "typeset -a x=\\(\\$\\(forbidden\\)\\)",
        "readonly -a x=\\(\\$\\(forbidden\\)\\)",
        "export -a x=\\(\\$\\(forbidden\\)\\)",
        "declare -a x=\\(\\<\\(forbidden\\)\\)",
        "declare -a x=\\(\\`forbidden\\`\\)",
    ],
)
def test_a_backslash_escaped_compound_assignment_is_read(command: str) -> None:
    assert evaluate(POLICY, command).approval is RuleAction.deny, command


@pytest.mark.parametrize("command", ["declare -a x=\\(a b\\)", "echo \\$HOME \\(x\\)"])
def test_backslash_escapes_without_code_stay_allowed(command: str) -> None:
    verdict = evaluate(POLICY, command)
    assert verdict.approval is RuleAction.allow and not verdict.unreadable_reasons, verdict


@pytest.mark.parametrize(
    "command",
    [
        # `fc -s` and `fc -e -` re-run history, and `fc -e PROG` runs what PROG leaves in
        # its file of history: text the reader never sees (`history -s`, an earlier call).
        "history -s forbidden; fc -s",
        "history -s 'forbidden x'; fc -s -1",
        "history -s 'echo x'; fc -s echo=forbidden",
        "history -s 'forbidden x'; fc -e -",
        "fc",
        "fc -e vi 1",
    ],
)
def test_fc_rerunning_history_is_unreadable(command: str) -> None:
    assert read_command(command).unreadable, command
    assert evaluate(POLICY, command).approval is not RuleAction.allow, command


@pytest.mark.parametrize("command", ["history -s x; fc -e forbidden", "fc -eforbidden"])
def test_the_editor_fc_runs_is_read_as_a_command(command: str) -> None:
    assert "forbidden" in read_command(command).segments, command
    assert evaluate(POLICY, command).approval is RuleAction.deny, command


@pytest.mark.parametrize("command", ["fc -l", "fc -ln -5", "history -s x", "history 5"])
def test_listing_or_storing_history_stays_allowed(command: str) -> None:
    verdict = evaluate(POLICY, command)
    assert verdict.approval is RuleAction.allow and not verdict.unreadable_reasons, verdict


@pytest.mark.parametrize(
    "command",
    [
        # getopt: `-C` may end a cluster (value next or attached), and each `-C` is judged
        # (bash keeps the last).
        "mapfile -tC forbidden -c1 x < f",
        "mapfile -tCforbidden -c1 x < f",
        "mapfile -c1 -tC forbidden < f",
        "mapfile -C : -C forbidden -c1 x < f",
        "readarray -tC forbidden -c1 x < f",
        "compgen -aC forbidden x",
        "compgen -C : -C forbidden x",
        "complete -C : -C forbidden x",
    ],
)
def test_every_callback_of_a_builtin_is_read(command: str) -> None:
    assert evaluate(POLICY, command).approval is RuleAction.deny, command


@pytest.mark.parametrize(
    "command", ["mapfile -t x < f", "readarray -d , -t x < f", "compgen -c ls", "mapfile -C : x"]
)
def test_builtins_with_harmless_callbacks_stay_allowed(command: str) -> None:
    verdict = evaluate(POLICY, command)
    assert verdict.approval is RuleAction.allow and not verdict.unreadable_reasons, verdict


@pytest.mark.parametrize(
    "command",
    [
        # `git grep -O<pager>` opens the matching files in that pager (value attached only).
        "git grep -Oforbidden a",
        "git grep -iOforbidden a",
        "git grep --open-files-in-pager=forbidden a",
        "git grep --open-files=forbidden a",
        # Settings whose value git runs as a program or shell text.
        "git -c difftool.vimdiff.path=forbidden difftool -y -t vimdiff",
        "git -c mergetool.vimdiff.path=forbidden mergetool",
        "git -c gpg.format=ssh -c gpg.ssh.defaultKeyCommand='forbidden x' commit -S -m x",
        "git -c interactive.diffFilter='forbidden x >&2; cat' add -p",
        "git -c sendemail.sendmailcmd=forbidden send-email x",
        "git -c imap.tunnel=forbidden imap-send",
        "git -c core.alternateRefsCommand=forbidden fetch",
        "git -c submodule.x.update='!forbidden' submodule update",
        "git config imap.tunnel forbidden",
    ],
)
def test_git_options_and_settings_that_run_a_program_are_read(command: str) -> None:
    assert evaluate(POLICY, command).approval is RuleAction.deny, command


@pytest.mark.parametrize(
    "command",
    [
        "git grep -O a",
        "git grep -e Oops a",
        "git grep -eOops a",
        "git grep --open-files-in-pager a",
        "git -c submodule.x.update=rebase submodule update",
    ],
)
def test_git_grep_patterns_and_plain_settings_stay_allowed(command: str) -> None:
    verdict = evaluate(POLICY, command)
    assert verdict.approval is RuleAction.allow and not verdict.unreadable_reasons, verdict


@pytest.mark.parametrize(
    ("command", "segment"),
    [
        # `capsh … --` hands what follows to bash; `gdb --args` (or `-args`) names the program
        # it runs, with its arguments.
        ("capsh -- -c 'forbidden x'", "forbidden x"),
        ("capsh --caps=cap_net_raw+ep -- -c 'forbidden x'", "forbidden x"),
        ("echo 'forbidden x' | capsh --", "forbidden x"),
        ("gdb --args forbidden x", "forbidden x"),
        ("gdb -batch -ex run -args forbidden x", "forbidden x"),
    ],
)
def test_what_capsh_and_gdb_run_is_read_as_a_segment(command: str, segment: str) -> None:
    assert segment in read_command(command).segments, command
