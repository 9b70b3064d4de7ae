"""Unit tests for app.policy.interceptor (pure; nothing is executed); docs/policy.md#interceptor."""

from __future__ import annotations

import re

import pytest

from app.policy.engine import InterceptorRule, InterceptorSettings
from app.policy.interceptor import (
    DEFAULT_INTERCEPTOR_RULES,
    Interception,
    check,
    compile_rule,
    effective_rules,
)
from app.policy.shell.syntax import extract_leading_cd
from tests.policy_corpus import HOSTILE_INTERCEPTOR_INPUTS

ALL_TOOLS = frozenset({"read", "grep", "glob", "edit", "write", "bash"})
GIT_COMMIT = InterceptorRule(pattern=r"^\s*git\s+commit\b", tool="bash", message="Use git tool.")


def blocked(command: str, rules: list[InterceptorRule], tools: frozenset[str] = ALL_TOOLS) -> bool:
    return check(command, tools, rules, command) is not None


def check_like_the_tool(command: str, rules: list[InterceptorRule]) -> Interception | None:
    """The executions flow: check the original, then the `cd`-rewritten command, quoting the
    original in the message."""
    result = check(command, ALL_TOOLS, rules, command)
    rewritten = extract_leading_cd(command)
    if result is None and rewritten is not None:
        result = check(rewritten.rest, ALL_TOOLS, rules, command)
    return result


# --- the original and the rewritten command, tools, messages ---------------------------------


def test_original_command_is_checked_before_the_cd_rewrite() -> None:
    rule = InterceptorRule(pattern=r"^\s*cd\s+", tool="bash", message="No cd.")
    result = check_like_the_tool("cd packages/x && echo ok", [rule])
    assert result == Interception(
        tool="bash", message="Blocked: No cd.\n\nOriginal command: cd packages/x && echo ok"
    )


def test_command_after_a_leading_cd_is_checked_and_the_message_quotes_the_original() -> None:
    rule = InterceptorRule(pattern=r"^\s*cat\s+", tool="read", message="Use read instead.")
    result = check_like_the_tool("cd pkg && cat package.json", [rule])
    assert result is not None
    assert result.message.endswith(
        "Use read instead.\n\nOriginal command: cd pkg && cat package.json"
    )


def test_default_rules_route_cat_to_the_read_tool() -> None:
    result = check("cat test.txt", {"read"}, effective_rules(InterceptorSettings()), "cat test.txt")
    assert result is not None
    assert result.tool == "read"
    assert re.search(r"Use the `read` tool instead of cat/head/tail", result.message)
    assert result.message.startswith("Blocked: ")


def test_explicit_empty_rule_list_blocks_nothing() -> None:
    rules = effective_rules(InterceptorSettings(enabled=True, rules=[]))
    assert rules == []
    assert check("cat test.txt", ALL_TOOLS, rules, "cat test.txt") is None


def test_custom_rule_blocks_with_its_own_message() -> None:
    rule = InterceptorRule(pattern=r"^\s*customcmd\s+", tool="bash", message="Custom says no.")
    result = check("customcmd arg", {"bash"}, [rule], "customcmd arg")
    assert result == Interception(
        tool="bash", message="Blocked: Custom says no.\n\nOriginal command: customcmd arg"
    )


# --- flat segments -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        "git add . && git commit -m x",
        "git add .; git commit -m x",
        "false || git commit -m x",
        "sleep 1 & git commit -m x",
        "git add .\ngit commit -m x",
        "git add . &&git commit -m x",
    ],
)
def test_rule_matches_a_command_after_compound_operators(command: str) -> None:
    assert blocked(command, [GIT_COMMIT])


def test_rule_does_not_match_the_stage_after_a_single_pipe() -> None:
    assert not blocked("echo msg | git commit -F -", [GIT_COMMIT])


def test_leading_variable_assignments_do_not_hide_a_command_from_rules() -> None:
    assert blocked('A="x" B=y git commit -m x', [GIT_COMMIT])
    assert blocked("echo a && GIT_AUTHOR_NAME='a b' git commit", [GIT_COMMIT])


@pytest.mark.parametrize(
    "command",
    [
        "printf '%s\\n' \"git add && git commit\"",
        'echo "git commit"',
        "echo git\\ commit",
        "echo ok # git commit",
        "echo ok # && git commit",
    ],
)
def test_quoted_escaped_or_commented_text_is_not_a_segment(command: str) -> None:
    assert not blocked(command, [GIT_COMMIT])


@pytest.mark.parametrize("command", [">|git commit", "echo >& git commit", "<&3 git commit"])
def test_redirect_targets_are_not_segments(command: str) -> None:
    assert not blocked(command, [GIT_COMMIT])


def test_operator_after_fd_duplication_still_splits_segments() -> None:
    assert blocked("echo hi <&3 && git commit", [GIT_COMMIT])


@pytest.mark.parametrize(
    "command",
    [
        "echo $(git commit)",
        "echo `git commit`",
        "echo ${x;git commit}",
        "echo ok && (git commit)",
        "echo ok && { git commit; }",
        "cat <<EOF && true\ngit commit\nEOF",
    ],
)
def test_commands_nested_in_substitutions_groups_or_heredocs_are_not_segments(command: str) -> None:
    assert not blocked(command, [GIT_COMMIT])


def test_rule_written_against_the_full_input_still_matches() -> None:
    rule = InterceptorRule(pattern=r"^git add file && git commit", tool="bash")
    assert blocked("git add file && git commit -m x", [rule])


def test_rule_for_an_unavailable_tool_is_skipped() -> None:
    assert not blocked("cat test.txt", list(DEFAULT_INTERCEPTOR_RULES), frozenset({"grep"}))
    assert blocked("cat test.txt", list(DEFAULT_INTERCEPTOR_RULES), frozenset({"read"}))


# --- default rules -----------------------------------------------------------------------------

DEFAULTS = list(DEFAULT_INTERCEPTOR_RULES)


@pytest.mark.parametrize(
    "command",
    [
        "echo hi > out.txt",
        "echo hi >> out.txt",
        "echo hi >| out.txt",
        "echo hi > $OUT",
        'printf "%s" foo > /tmp/x',
        "echo data > /dev/null > out.txt",
        "echo data > ./dev/null",
        "echo data > /devices/x",
        "echo 'quoted > inside' > file",
        "cat <<EOF > notes.md\nhello\nEOF",
        "cat <<'EOF' > notes.md\nhello\nEOF",
        "echo x 2>&1 > out.txt",
        "echo x &> out.txt",
        "cd src && echo x > out.txt",
    ],
)
def test_echo_and_printf_redirects_into_files_route_to_write(command: str) -> None:
    result = check(command, {"write"}, DEFAULTS, command)
    assert result is not None
    assert result.tool == "write"


@pytest.mark.parametrize(
    "command",
    [
        "echo x > /dev/null",
        "echo x 2>&1",
        'echo x > "/dev/null"',
        "echo x > '/dev/stderr'",
        'echo "a -> b"',
        'echo "<p>hi</p>"',
        "printf 'use 2>&1'",
        'echo "err" >&2',
        "echo hi | cat > out.txt",
        "echo building && make > build.log",
        "echo a; ls > listing.txt",
        "cat <<EOF\n<p>hi</p>\nEOF",
        "echoes > x",
    ],
)
def test_harmless_output_redirects_pass(command: str) -> None:
    assert check(command, {"write"}, DEFAULTS, command) is None


@pytest.mark.parametrize(
    "command",
    [
        "bun run dev",
        "npm start",
        "pnpm dev --port 3000",
        "vite --host 0.0.0.0",
        "next dev",
        "nodemon server.js",
        "lldb ./app",
        "gdb ./app",
        "tail -f log",
        "docker compose up",
        "bun test --watch",
        "npm run test -- -w",
        "tsc --watch",
        "pytest -w",
        "nohup server",
        "server &",
        "make && server &",
    ],
)
def test_services_watchers_and_background_syntax_route_to_bash(command: str) -> None:
    result = check(command, {"bash"}, DEFAULTS, command)
    assert result is not None
    assert result.tool == "bash"


@pytest.mark.parametrize(
    "command",
    [
        "git diff -w",
        "docker compose up -d",
        "docker compose up --detach web",
        "bun test",
        "printf 'server &'",
        "a && b",
        "echo a \\&",
        "npm run build",
        "vitest run",
    ],
)
def test_finite_commands_pass_the_bash_rules(command: str) -> None:
    assert check(command, {"bash"}, DEFAULTS, command) is None


@pytest.mark.parametrize(
    "command",
    [
        "grep pattern path",
        "rg pattern src",
        "grep x file | wc -l",
        "cat log | tr a b && grep err file",
        "LC_ALL=C grep x file",
    ],
)
def test_grep_rule_blocks_first_stage_greps(command: str) -> None:
    result = check(command, {"grep"}, DEFAULTS, command)
    assert result is not None
    assert result.tool == "grep"


@pytest.mark.parametrize(
    "command",
    [
        "printf 'x\\n' | grep x",
        "tr a b < in | grep -v y",
        "cat log |\ngrep err",
        "cat log |\n# only errors\ngrep err",
        "make |& grep error",
    ],
)
def test_grep_rule_ignores_stages_reading_piped_stdin(command: str) -> None:
    assert check(command, {"grep"}, DEFAULTS, command) is None


@pytest.mark.parametrize(
    ("command", "tool"),
    [
        ("head -n 5 f", "read"),
        ("find . -name '*.py'", "glob"),
        ("fd --type f", "glob"),
        ("sed -i 's/a/b/' f", "edit"),
        ("perl -pi -e 's/a/b/' f", "edit"),
        ("awk -i inplace '{print}' f", "edit"),
    ],
)
def test_other_default_rules_route_to_their_tools(command: str, tool: str) -> None:
    result = check(command, ALL_TOOLS, DEFAULTS, command)
    assert result is not None
    assert result.tool == tool


def test_default_rules_are_the_reference_ten_in_order() -> None:
    assert [rule.tool for rule in DEFAULT_INTERCEPTOR_RULES] == [
        "read",
        "grep",
        "glob",
        "edit",
        "edit",
        "edit",
        "write",
        "bash",
        "bash",
        "bash",
    ]
    assert DEFAULT_INTERCEPTOR_RULES[0].pattern == r"^\s*(cat|head|tail|less|more)\s+"


# --- rule handling ---------------------------------------------------------------------------


def test_effective_rules_default_to_the_builtin_list() -> None:
    assert effective_rules(InterceptorSettings()) == list(DEFAULT_INTERCEPTOR_RULES)


def test_rule_order_wins_over_candidate_order() -> None:
    on_segment = InterceptorRule(pattern=r"^make\b", tool="bash", message="first rule")
    on_full = InterceptorRule(pattern=r"^echo\b", tool="bash", message="second rule")
    result = check("echo a && make", {"bash"}, [on_segment, on_full], "echo a && make")
    assert result is not None
    assert "first rule" in result.message


def test_rule_flags_apply_when_matching() -> None:
    rule = InterceptorRule(pattern=r"^CAT\s", flags="i", tool="read")
    assert blocked("cat f", [rule])
    assert not blocked("cat f", [InterceptorRule(pattern=r"^CAT\s", tool="read")])


def test_sticky_and_global_flags_change_nothing() -> None:
    rule = InterceptorRule(pattern=r"commit", flags="gy", tool="bash")
    assert blocked("git commit", [rule])
    assert blocked("git commit", [rule])


def test_empty_message_falls_back_to_command_blocked() -> None:
    rule = InterceptorRule(pattern="x", tool="bash", message="")
    result = check("x", {"bash"}, [rule], "x")
    assert result is not None
    assert result.message == "Blocked: Command blocked\n\nOriginal command: x"


def test_invalid_rule_built_without_validation_is_skipped() -> None:
    broken = InterceptorRule.model_construct(pattern="(", flags="", tool="bash", message="m")
    good = InterceptorRule(pattern="^x", tool="bash", message="good")
    assert compile_rule(broken) is None
    result = check("x", {"bash"}, [broken, good], "x")
    assert result is not None
    assert "good" in result.message


def test_compile_rule_applies_the_i_m_s_flags() -> None:
    text = "x\nA\nb\ny"
    with_flags = compile_rule(InterceptorRule(pattern="^a.b$", flags="ims", tool="bash"))
    without = compile_rule(InterceptorRule(pattern="^a.b$", tool="bash"))
    assert with_flags is not None and without is not None
    assert with_flags.search(text)
    assert not without.search(text)


def test_full_command_candidate_is_trimmed() -> None:
    rule = InterceptorRule(pattern=r"^cat f$", tool="read")
    assert blocked("   cat f \n", [rule])


@pytest.mark.parametrize(("command", "tool"), HOSTILE_INTERCEPTOR_INPUTS)
def test_built_in_rules_judge_hostile_sized_input_like_its_plain_form(
    command: str, tool: str | None
) -> None:
    # How long these take (they run on Python `re`, with lookaround) is bench_policy's
    # `hostile_inputs`, not a unit test's business.
    tools = ["read", "grep", "glob", "edit", "write", "bash"]
    result = check(command, tools, DEFAULT_INTERCEPTOR_RULES, command)
    assert (result.tool if result else None) == tool
