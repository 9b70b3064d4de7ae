"""Unit tests for app.policy.shell.scanner, the one quote/escape scanner of the reader."""

from __future__ import annotations

from app.policy.shell.scanner import (
    double_quote_end,
    is_escaped,
    quoted_end,
    read_double_quoted,
    single_quote_end,
    skip_blanks,
)


def test_single_quote_ends_after_the_next_quote_even_after_a_backslash() -> None:
    text = "'a\\' b"
    assert single_quote_end(text, 0) == 4


def test_unterminated_single_quote_has_no_end() -> None:
    assert single_quote_end("'abc", 0) == -1


def test_double_quote_skips_an_escaped_quote() -> None:
    text = '"a\\"b" c'
    assert double_quote_end(text, 0) == 6


def test_double_quote_with_a_trailing_backslash_has_no_end() -> None:
    assert double_quote_end('"ab\\', 0) == -1


def test_double_quote_refuses_an_unescaped_substitution_only_when_asked() -> None:
    assert double_quote_end('"$(x)"', 0) == 6
    assert double_quote_end('"$(x)"', 0, refuse_substitution=True) == -1
    assert double_quote_end('"`x`"', 0, refuse_substitution=True) == -1
    assert double_quote_end('"\\$(x)"', 0, refuse_substitution=True) == 7


def test_read_double_quoted_undoes_only_the_escapes_bash_undoes_there() -> None:
    assert read_double_quoted('"a\\"b\\n\\$"', 0) == ('a"b\\n$', 10)


def test_read_double_quoted_of_an_unterminated_string_runs_to_the_end() -> None:
    assert read_double_quoted('"ab\\"c', 0) == ('ab"c', -1)


def test_quoted_end_reads_an_escape_and_either_quote() -> None:
    assert quoted_end("\\x y", 0) == 2
    assert quoted_end("\\", 0) == -1
    assert quoted_end("'a b' c", 0) == 5
    assert quoted_end('"a b" c', 0) == 5


def test_is_escaped_counts_the_backslashes_before_a_character() -> None:
    assert is_escaped("a\\'", 2)
    assert not is_escaped("a\\\\'", 3)


def test_skip_blanks_stops_at_a_newline() -> None:
    assert skip_blanks(" \t \nx", 0) == 3
