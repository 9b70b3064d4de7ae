"""Unit tests for app.policy.shell.syntax (pure; nothing is executed)."""

from __future__ import annotations

import pytest

from app.policy.shell.syntax import (
    FlatSegment,
    LeadingCd,
    UnparseableCommandError,
    clear_segment_cache,
    extract_leading_cd,
    flat_segments,
    has_control_syntax,
    normalize_whitespace,
    policy_segments,
    read_command,
    rough_segments,
    strip_leading_assignments,
)

# --- leading cd rewrite (docs/api.md#processing-order) --------------------------------------


def test_cd_with_redirect_is_not_rewritten() -> None:
    assert extract_leading_cd("cd /tmp 2>/dev/null && x") is None


def test_cd_with_double_quoted_path_is_rewritten_to_cwd_and_rest() -> None:
    assert extract_leading_cd('cd "a b" && ls') == LeadingCd(target="a b", rest="ls")


def test_multiline_script_starting_with_cd_is_not_rewritten() -> None:
    assert extract_leading_cd("cd /nope\necho one && echo two") is None


def test_cd_followed_by_semicolon_is_rewritten() -> None:
    assert extract_leading_cd("cd x; y") == LeadingCd(target="x", rest="y")


def test_cd_followed_by_or_is_not_rewritten() -> None:
    assert extract_leading_cd("cd x || y") is None


def test_cd_to_parameter_expansion_is_not_rewritten() -> None:
    assert extract_leading_cd("cd $HOME && x") is None


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("cd /tmp && ls -la", LeadingCd("/tmp", "ls -la")),
        ("cd\t/tmp\t&&\tls", LeadingCd("/tmp", "ls")),
        ("cd 'it''s' && ls", LeadingCd("its", "ls")),
        ("cd 'a $b' && ls", None),  # a `$` in the token is refused even when quoted
        ("cd a\\ b && ls", LeadingCd("a b", "ls")),
        ('cd "a\\"b" && ls', LeadingCd('a"b', "ls")),
        ('cd "a\\nb" && ls', LeadingCd("a\\nb", "ls")),
        ("cd ~/src && make test", LeadingCd("~/src", "make test")),
        ("cd x;y", LeadingCd("x", "y")),
        ("cd x &&\n  make", LeadingCd("x", "make")),
    ],
)
def test_cd_rewrite_reads_exactly_one_token(command: str, expected: LeadingCd | None) -> None:
    assert extract_leading_cd(command) == expected


@pytest.mark.parametrize(
    "command",
    [
        " cd /tmp && ls",  # leading whitespace
        "cd",
        "cd /tmp",  # no operator
        "cd /tmp &&",  # nothing to run
        "cd /tmp ; ",
        "cd /a /b && ls",  # second argument
        "cd /tmp > log && ls",  # redirect
        "cd `pwd` && ls",  # backtick
        "cd $(pwd) && ls",  # substitution
        "cd (x) && ls",  # `(` ends an empty token
        "cd 'open && ls",  # open quote
        '"cd" /tmp && ls',
        "cd /tmp \\\n && ls",  # line continuation
        "cd /tmp | ls",
        "cd /tmp & ls",
        "cd /tmp;; ls",
        "cdx && ls",
        "cd /tmp\n&& ls",
    ],
)
def test_cd_rewrite_refuses_anything_needing_the_shell(command: str) -> None:
    assert extract_leading_cd(command) is None


# --- whitespace ---------------------------------------------------------------------------


def test_normalize_whitespace_trims_and_collapses_runs() -> None:
    assert normalize_whitespace("  git \t status\r\n --short  ") == "git status --short"
    assert normalize_whitespace(" \t\n") == ""


# --- control syntax for allow rules (docs/policy.md#how-allow-matches) ---------------------


@pytest.mark.parametrize(
    "command",
    [
        "git status; rm f",
        "git status && rm f",
        "git status | sh",
        "git status\nrm f",
        "git status\r\nrm f",
        "git status $(rm f)",
        "git status `rm f`",
        "git status > out",
        "git status < in",
        "git log & rm f",
        "git log (x)",
        'git commit -m "$(rm f)"',
        'git commit -m "`rm f`"',
        'git commit -m "$HOME"',
        "git -c alias.x='!rm f; x' x",
        'sh -c "ls; rm f"',
        "bash --command='a|b'",
        "grep -e 'a|b' file",
        "find . -exec rm {} \\;",
        "echo 'unterminated",
        "echo trailing\\",
    ],
)
def test_control_syntax_is_detected(command: str) -> None:
    assert has_control_syntax(command)


@pytest.mark.parametrize(
    "command",
    [
        "git status",
        "git  status",
        "git\tstatus",
        "git status --short",
        "cargo bench --bench layers '^layer3/(10|1000)$'",
        "echo 'a; b'",
        'echo "a & b"',
        "echo a\\;b",
        "",
    ],
)
def test_quoted_metacharacters_without_reinterpreting_option_are_not_control(
    command: str,
) -> None:
    assert not has_control_syntax(command)


# --- policy segments -------------------------------------------------------------------------

BURIED_RM = [
    "echo a; rm -rf x",
    "echo a && rm -rf x",
    "false || rm -rf x",
    "cat f | rm -rf x",
    "cat f |& rm -rf x",
    "sleep 1 & rm -rf x",
    "echo a\nrm -rf x",
    "echo a\r\nrm -rf x",
    "echo $(rm -rf x)",
    "echo `rm -rf x`",
    "(rm -rf x)",
    "{ rm -rf x; }",
    "bash -c 'rm -rf x'",
    'sh -c "rm -rf x"',
    "zsh -c 'rm -rf x'",
    "dash -c 'rm -rf x'",
    "ksh -c 'rm -rf x'",
    "bash -lc 'rm -rf x'",
    "sh -ec 'rm -rf x'",
    "bash -o pipefail -c 'rm -rf x'",
    "bash --norc -c 'rm -rf x'",
    '"rm" -rf x',
    "'rm' -rf x",
    "r\\m -rf x",
    "$'rm' -rf x",
    "$'\\x72\\x6d' -rf x",
    "  rm   -rf \t x  ",
    "rm\t-rf\tx",
    "/bin/rm -rf x",
    'echo "$(rm -rf x)"',
    "echo ${v:-$(rm -rf x)}",
    'echo "${v:-$(rm -rf x)}"',
    "X=$(rm -rf x) true",
    "diff <(rm -rf x) f",
    "tee >(rm -rf x) < f",
    "echo $(( $(rm -rf x) + 1 ))",
    "$((rm -rf x); true)",
    "if true; then rm -rf x; fi",
    "while false; do rm -rf x; done",
    "for f in a b; do rm -rf x; done",
    "f() { rm -rf x; }",
    "function f { rm -rf x; }",
    "case $v in a) rm -rf x;; esac",
    "[[ -d x ]] && rm -rf x",
    "(( n << 2 ))\nrm -rf x",
    "! rm -rf x",
    "cat <<EOF\n$(rm -rf x)\nEOF",
    "cat <<EOF\n`rm -rf x`\nEOF",
    "bash <<EOF\nrm -rf x\nEOF",
    "bash <<'EOF'\nrm -rf x\nEOF",
    'bash <<< "rm -rf x"',
    "eval 'rm -rf x'",
    "su -c 'rm -rf x' root",
    "watch -n 5 rm -rf x",
    "find . -name y -exec rm -rf x \\;",
    "rm${IFS}-rf${IFS}x",
    "sh -c \"bash -c 'rm -rf x'\"",
    "echo `echo \\`rm -rf x\\``",
]


@pytest.mark.parametrize("command", BURIED_RM)
def test_policy_segments_find_a_command_at_any_depth(command: str) -> None:
    assert "rm -rf x" in policy_segments(command)


WRAPPED_RM = [
    "timeout 5 rm -rf x",
    "timeout -s KILL -k 5 10s rm -rf x",
    "timeout --signal=TERM 5 rm -rf x",
    "env rm -rf x",
    "env -i A=1 B=2 rm -rf x",
    "env -u HOME rm -rf x",
    "A=1 rm -rf x",
    "A=1 B='two words' rm -rf x",
    "nohup rm -rf x",
    "nice rm -rf x",
    "nice -n 10 rm -rf x",
    "nice -5 rm -rf x",
    "time rm -rf x",
    "time -p rm -rf x",
    "sudo rm -rf x",
    "sudo -u root rm -rf x",
    "sudo -E -H rm -rf x",
    "sudo --user=root rm -rf x",
    "doas rm -rf x",
    "command rm -rf x",
    "builtin rm -rf x",
    "exec rm -rf x",
    "stdbuf -oL -e0 rm -rf x",
    "setsid rm -rf x",
    "ionice -c 3 rm -rf x",
    "busybox rm -rf x",
    "xargs -0 -n1 rm -rf x",
    "sudo env X=1 timeout 5 nohup nice -n 5 rm -rf x",
    "/usr/bin/sudo /usr/bin/env A=1 /bin/rm -rf x",
]


@pytest.mark.parametrize("command", WRAPPED_RM)
def test_policy_segments_strip_wrappers_repeatedly(command: str) -> None:
    assert "rm -rf x" in policy_segments(command)


def test_policy_segments_remove_quotes_and_normalise_whitespace() -> None:
    assert policy_segments("  \"git\"   'status'\t--short ") == ["git status --short"]


def test_policy_segments_of_compound_command_list_each_simple_command() -> None:
    assert policy_segments("cd /tmp && rm -rf /tmp/x && echo done") == [
        "cd /tmp",
        "rm -rf /tmp/x",
        "echo done",
    ]


def test_double_parenthesis_arithmetic_runs_no_command() -> None:
    # bash evaluates `$((rm -rf x))` as arithmetic (an error), never as a command.
    assert "rm -rf x" not in policy_segments("echo $((rm -rf x))")
    assert "rm -rf x" in policy_segments("echo $((rm -rf x) )")


def test_case_inside_command_substitution_is_read() -> None:
    segments = policy_segments("echo $(case $v in a) rm -rf x;; esac) done")
    assert "rm -rf x" in segments


def test_cached_segments_are_not_shared_with_callers() -> None:
    first = policy_segments("git status && rm -rf x")
    first.append("mutated by caller")
    assert policy_segments("git status && rm -rf x") == ["git status", "rm -rf x"]
    clear_segment_cache()
    assert policy_segments("git status && rm -rf x") == ["git status", "rm -rf x"]


def test_xargs_segment_also_stands_for_the_arguments_it_reads() -> None:
    segments = policy_segments("find . -name '*.o' | xargs rm -rf")
    assert "rm -rf" in segments
    assert "rm -rf {}" in segments


def test_redirections_appear_with_and_without_the_command_words() -> None:
    segments = policy_segments("rm -rf x 2>/dev/null >log")
    assert segments[:2] == ["rm -rf x 2>/dev/null >log", "rm -rf x"]


def test_quoted_heredoc_body_is_data_not_commands() -> None:
    command = "cat <<'EOF' > notes.md\nrm -rf x\n$(rm -rf y)\nEOF\necho done"
    segments = policy_segments(command)
    assert "rm -rf x" not in segments
    assert "rm -rf y" not in segments
    assert "echo done" in segments


def test_comments_are_not_commands() -> None:
    assert policy_segments("git status # ; rm -rf x") == ["git status"]


def test_for_and_case_headers_are_not_commands() -> None:
    segments = policy_segments('for f in *.txt; do wc -l "$f"; done')
    assert segments == ["wc -l $f"]


def test_empty_and_blank_commands_have_no_segments() -> None:
    assert policy_segments("") == []
    assert policy_segments(" \t\n") == []


@pytest.mark.parametrize(
    "command",
    [
        'echo "unterminated',
        "echo 'unterminated",
        "echo $(unterminated",
        "echo `unterminated",
        "echo trailing\\",
        "echo a )",
        "echo >",
    ],
)
def test_unreadable_text_raises_unparseable(command: str) -> None:
    with pytest.raises(UnparseableCommandError):
        policy_segments(command)


def test_excessive_nesting_raises_unparseable() -> None:
    command = "rm -rf x"
    for _ in range(20):
        command = "echo $(" + command + ")"
    with pytest.raises(UnparseableCommandError, match="too deep"):
        policy_segments(command)


def test_large_script_is_segmented() -> None:
    command = "\n".join(f"echo {i} && touch f{i}" for i in range(2000)) + "\nrm -rf x"
    segments = policy_segments(command)
    assert "rm -rf x" in segments
    assert "touch f1999" in segments


def test_rough_segments_split_unparseable_text_without_raising() -> None:
    assert rough_segments('echo "open; rm -rf x') == ["echo open; rm -rf x"]
    assert "rm -rf x" in rough_segments("echo 'a' && sudo rm -rf x && echo \"b")
    assert "rm -rf x" in rough_segments("echo `rm -rf x")


# --- interceptor flat splitter (docs/policy.md#interceptor) --------------------------------


def _texts(command: str) -> list[str] | None:
    segments = flat_segments(command)
    return None if segments is None else [segment.text for segment in segments]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("a && b", ["a", "b"]),
        ("a || b", ["a", "b"]),
        ("a; b", ["a", "b"]),
        ("a & b", ["a", "b"]),
        ("a\nb", ["a", "b"]),
        ("a | b", ["a", "b"]),
        ("a |& b", ["a", "b"]),
        ("  a  ;;  ", ["a"]),
        ("printf '%s\\n' \"git add && git commit\"", ["printf '%s\\n' \"git add && git commit\""]),
        ("echo git\\ commit", ["echo git\\ commit"]),
        ("echo ok # git commit", ["echo ok"]),
        ("echo ok # a\nnext", ["echo ok", "next"]),
        ("echo a#b", ["echo a#b"]),
        (">|git commit", [">|git commit"]),
        ("echo >& git commit", ["echo >& git commit"]),
        ("<&3 git commit", ["<&3 git commit"]),
        ("cmd &>/dev/null", ["cmd &>/dev/null"]),
        ("echo hi <&3 && git commit", ["echo hi <&3", "git commit"]),
        ('echo "${HOME}" && x', ['echo "${HOME}"', "x"]),
        ("echo {a,b}", ["echo {a,b}"]),
    ],
)
def test_flat_segments_split_on_unquoted_operators_only(command: str, expected: list[str]) -> None:
    assert _texts(command) == expected


@pytest.mark.parametrize(
    "command",
    [
        "echo $(git commit)",
        "echo `git commit`",
        "echo ${x;git commit}",
        "(git commit)",
        "{ git commit; }",
        "cat <<EOF\ngit commit\nEOF",
        'echo "$(git commit)"',
        'echo "`git commit`"',
        "echo trailing\\",
        "echo 'open",
        'echo "open',
        "echo a; }",
    ],
)
def test_flat_segments_give_up_on_hidden_structure(command: str) -> None:
    assert flat_segments(command) is None


def test_segment_after_single_pipe_reads_piped_stdin() -> None:
    assert flat_segments("printf x | grep x") == [
        FlatSegment("printf x", piped_stdin=False),
        FlatSegment("grep x", piped_stdin=True),
    ]


def test_pipe_state_survives_blank_and_comment_lines() -> None:
    segments = flat_segments("cat f |\n\n# filter\ngrep x")
    assert segments == [FlatSegment("cat f", False), FlatSegment("grep x", True)]


@pytest.mark.parametrize("separator", ["||", ";", "&", "&&", "\n"])
def test_pipe_state_resets_after_other_separators(separator: str) -> None:
    segments = flat_segments(f"a | b {separator} c")
    assert segments is not None
    assert [segment.piped_stdin for segment in segments] == [False, True, False]


def test_pipe_and_stderr_operator_also_pipes_stdin() -> None:
    segments = flat_segments("make |& grep error")
    assert segments is not None
    assert segments[1] == FlatSegment("grep error", piped_stdin=True)


def test_comment_without_newline_ends_the_split() -> None:
    assert _texts("a && b # c && d") == ["a", "b"]


@pytest.mark.parametrize(
    ("segment", "expected"),
    [
        ('A="x" B=y git commit', "git commit"),
        ("A='a b' git commit", "git commit"),
        ("A=a\\ b\tgit commit", "git commit"),
        ("git commit", None),
        ("A=1 B=2", None),
        ("A='open git commit", None),
        ("A=x\\", None),
        ("1A=x git", None),
    ],
)
def test_strip_leading_assignments(segment: str, expected: str | None) -> None:
    assert strip_leading_assignments(segment) == expected


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("case $v in a) rm -rf x;; b|c) echo c;; esac", ["rm -rf x", "echo c"]),
        ("arr=(a b c); echo ${arr[@]}", ["arr=(a b c)", "echo ${arr[@]}"]),
        ("select x in a b; do echo $x; done", ["echo $x"]),
        ("coproc NAME { rm -rf x; }", ["rm -rf x"]),
        ("[[ $a == b ]] && echo y", ["echo y"]),
        ("time make test", ["time make test", "make test"]),
        ("echo $(( 1 + 2 ))", ["echo $(( 1 + 2 ))"]),
    ],
)
def test_the_grammar_leaves_no_stray_segments(command: str, expected: list[str]) -> None:
    assert policy_segments(command) == expected


def test_stacked_wrappers_unwrap_at_any_height() -> None:
    segments = policy_segments("nohup " * 100 + "rm -rf x")
    assert "rm -rf x" in segments


def test_a_reader_limit_is_reported_as_unreadable_not_ignored() -> None:
    reading = read_command("env nice timeout 5 " * 1000 + "rm -rf x")
    assert reading.limit_reached == "too many wrapper layers to unwrap"
    assert reading.unreadable[0].startswith("too many wrapper layers to unwrap")


def test_a_tall_stack_of_one_wrapper_reaches_its_command_despite_the_limit() -> None:
    assert "rm -rf x" in read_command("nohup " * 5000 + "rm -rf x").segments


def test_text_the_grammar_drops_is_read_by_the_lexer() -> None:
    # tree-sitter-bash loses the `-` before a here-doc without reporting an error.
    assert "python3 -" in policy_segments("python3 - <<'EOF'\nprint(1)\nEOF")


def test_a_flood_of_double_parens_is_a_limit_not_quadratic_work() -> None:
    # Each `((` that is not arithmetic was read to the end of the text: 64 KiB of `(` took
    # minutes of CPU. The scans now share a budget of a few passes over the text.
    reading = read_command("(" * 65_536)
    assert reading.limit_reached == "too many '((' to read"
    spaced = read_command("( " * 30_000 + "rm -rf /nonexistent-x" + " )" * 30_000)
    assert spaced.limit_reached is None  # single parens are subshells, read as such
    assert "rm -rf /nonexistent-x" in spaced.segments


def test_arithmetic_within_the_budget_still_reads() -> None:
    command = "; ".join(f"(( x{i} = {i} + 1 ))" for i in range(200)) + "; echo $((x1 * 2))"
    reading = read_command(command)
    assert reading.limit_reached is None and reading.parse_error is None
    assert "echo $((x1 * 2))" in reading.segments
