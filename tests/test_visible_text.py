"""What makes planted text safe to show (app/core/visible_text.py): every character that would not
show as itself becomes its escape; everything else is left as it is."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.core.visible_text import is_hidden, pieces, visible


def test_terminal_controls_bidi_and_zero_width_characters_become_escapes() -> None:
    planted = "ok\r\x1b[2Kecho safe\x1b]0;t\x07 \u202eevil\u202c\u200b\ufeff\u00a0\udcff\x85"
    assert visible(planted) == (
        "ok\\r\\x1b[2Kecho safe\\x1b]0;t\\x07 \\u202eevil\\u202c\\u200b\\ufeff\\xa0\\udcff\\x85"
    )


def test_plain_text_markup_and_other_scripts_are_left_as_they_are() -> None:
    for text in ["rm -rf ~/x; [bold]y[/] [link=http://e]z[/link]", "grüße 日本 ✓", ""]:
        assert visible(text) == text


def test_kept_characters_stay_and_each_escape_is_marked_apart() -> None:
    assert visible("a\nb\tc\r", keep="\n\t") == "a\nb\tc\\r"
    assert list(pieces("x\x1by")) == [("x", False), ("\\x1b", True), ("y", False)]


@given(st.text())
def test_what_is_shown_has_no_hidden_character_and_loses_no_visible_one(text: str) -> None:
    shown = visible(text)
    assert not any(is_hidden(char) for char in shown)
    assert [char for char in text if not is_hidden(char)] == [
        char for piece, escaped in pieces(text) if not escaped for char in piece
    ]
