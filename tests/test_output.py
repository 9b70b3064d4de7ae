from app.output.window import (
    HEAD_BYTES,
    MAX_COLUMNS,
    TAIL_BYTES,
    OutputSink,
    format_bytes,
    truncation_footer,
)


def feed_all(sink: OutputSink, *chunks: bytes) -> str:
    for chunk in chunks:
        sink.feed(chunk)
    sink.flush()
    return sink.summary().output


def numbered_lines(count: int, template: bytes = b"L%03d\n") -> bytes:
    return b"".join(template % i for i in range(count))


# -- windows and counters (docs/api.md#output-windows) ----------------------------------------


def test_hundred_thousand_bytes_are_all_counted_but_only_the_windows_are_shown() -> None:
    sink = OutputSink(max_columns=0)
    sink.feed(b"a" * 100_000)
    summary = sink.summary()
    assert summary.total_bytes == 100_000
    assert summary.output_bytes <= TAIL_BYTES + HEAD_BYTES + 1024
    assert summary.truncated
    elided = 100_000 - HEAD_BYTES - TAIL_BYTES
    assert summary.output == "a" * HEAD_BYTES + f"\n[…{elided}B elided…]\n" + "a" * TAIL_BYTES


def test_hundred_thousand_bytes_on_one_line_are_cut_by_the_column_cap() -> None:
    sink = OutputSink()
    sink.feed(b"a" * 100_000)
    summary = sink.summary()
    assert summary.total_bytes == 100_000
    assert summary.output == "a" * (MAX_COLUMNS - 3) + "…"
    assert summary.output_bytes == MAX_COLUMNS
    assert summary.column_dropped_bytes == 100_000 - (MAX_COLUMNS - 3)
    assert summary.column_truncated_lines == 1


def test_seq_output_fed_in_chunks_keeps_every_line_counted_and_the_last_values_shown() -> None:
    data = b"".join(b"%d\n" % i for i in range(1, 100_001))
    sink = OutputSink()
    for start in range(0, len(data), 4096):
        sink.feed(data[start : start + 4096])
    summary = sink.summary()
    assert summary.total_lines >= 100_000
    assert summary.total_bytes == len(data)
    assert summary.output_bytes <= 50 * 1024 + 20 * 1024 + 1024
    assert summary.output.startswith("1\n2\n3\n")
    assert summary.output.endswith("99999\n100000\n")
    assert f"\n[…{summary.elided_lines}ln elided…]\n" in summary.output
    tail_lines = summary.output_lines - summary.head_lines - 1
    assert summary.head_lines + summary.elided_lines + tail_lines == summary.total_lines


def test_notice_is_prefixed_as_its_own_bracketed_line() -> None:
    sink = OutputSink()
    sink.feed(b"hello\n")
    summary = sink.summary(notice="Command timed out after 1 seconds")
    assert summary.output == "[Command timed out after 1 seconds]\nhello\n"
    assert summary.output_bytes == len(b"hello\n")


def test_lines_are_counted_across_chunk_boundaries() -> None:
    sink = OutputSink()
    assert sink.summary().total_lines == 0
    sink.feed(b"a\nb")
    sink.feed(b"c\nd")
    assert sink.summary().total_lines == 3
    sink.feed(b"\n")
    assert sink.summary().total_lines == 4


def test_chunks_without_a_line_feed_count_no_line() -> None:
    # The window skips its newline count for such chunks (one long line: base64, minified
    # JSON); the lines before and after them still count exactly.
    sink = OutputSink(max_columns=100)
    sink.feed(b"first\n")
    for _ in range(3):
        sink.feed(b"x" * 70_000)  # past the column cap: dropped, not counted
        assert sink.summary().total_lines == 2
    sink.feed(b"\r")  # a lone CR is held back, then becomes a line break at the end
    sink.feed(b"tail")
    sink.feed(b"\nlast")
    sink.flush()
    summary = sink.summary()
    assert summary.total_lines == 4
    assert summary.column_truncated_lines == 1
    assert summary.output.endswith("tail\nlast")


def test_tail_window_keeps_exactly_the_last_bytes() -> None:
    sink = OutputSink(head_bytes=0, tail_bytes=5)
    sink.feed(b"abc")
    sink.feed(b"def")
    summary = sink.summary()
    assert summary.output == "bcdef"
    assert summary.total_bytes == 6
    assert summary.truncated


def test_tail_window_never_starts_inside_a_character() -> None:
    sink = OutputSink(head_bytes=0, tail_bytes=5)
    sink.feed("😀😀".encode())
    assert sink.summary().output == "😀"


def test_head_window_splits_on_a_character_boundary() -> None:
    sink = OutputSink(head_bytes=5, tail_bytes=4, max_columns=0)
    sink.feed("abcd€xyzw".encode())
    summary = sink.summary()
    assert summary.output == "abcd\n[…3B elided…]\nxyzw"
    assert summary.elided_bytes == 3


def test_middle_is_elided_with_a_line_count_marker_between_head_and_tail() -> None:
    sink = OutputSink(head_bytes=10, tail_bytes=10)
    sink.feed(numbered_lines(1000))
    summary = sink.summary()
    assert summary.output == "L000\nL001\n[…996ln elided…]\nL998\nL999\n"
    assert summary.elided_lines == 996
    assert summary.elided_bytes == 5000 - 20
    assert summary.total_lines == 1001
    assert summary.output_lines == 6
    assert summary.output_bytes == len(summary.output.encode())


def test_byte_marker_is_used_when_at_most_one_line_is_elided() -> None:
    sink = OutputSink(head_bytes=10, tail_bytes=10)
    sink.feed(b"abcd\n" * 5)
    summary = sink.summary()
    assert summary.output == "abcd\nabcd\n[…5B elided…]\nabcd\nabcd\n"
    assert summary.elided_lines == 1


def test_small_output_is_returned_whole_and_untruncated() -> None:
    sink = OutputSink()
    sink.feed(b"one\ntwo\n")
    summary = sink.summary()
    assert summary.output == "one\ntwo\n"
    assert not summary.truncated
    assert (summary.elided_bytes, summary.elided_lines) == (0, 0)
    assert (summary.output_lines, summary.total_lines) == (3, 3)


def test_memory_stays_bounded_for_a_seven_megabyte_stream() -> None:
    data = numbered_lines(700_000, b"line %07d\n")[: 7 * 1024 * 1024]
    sink = OutputSink()
    largest = 0
    for start in range(0, len(data), 64 * 1024):
        sink.feed(data[start : start + 64 * 1024])
        largest = max(largest, sink.retained_bytes)
    assert largest <= HEAD_BYTES + 2 * TAIL_BYTES + 64
    summary = sink.summary()
    assert summary.total_bytes == len(data)
    assert summary.output_bytes <= HEAD_BYTES + TAIL_BYTES + 1024


def test_summary_can_be_taken_repeatedly_while_feeding() -> None:
    sink = OutputSink(head_bytes=10, tail_bytes=10)
    sink.feed(b"first\n")
    assert sink.summary().output == "first\n"
    sink.feed(numbered_lines(10))
    first = sink.summary()
    sink.feed(b"last\n")
    second = sink.summary()
    assert first.output.endswith("L008\nL009\n")
    assert second.output.endswith("L009\nlast\n")
    assert second.total_bytes == first.total_bytes + 5


# -- decoding and sanitising --------------------------------------------------------------------


def test_carriage_return_progress_frames_become_lines() -> None:
    assert feed_all(OutputSink(), b"start\rone\rtwo\r\n") == "start\none\ntwo\n"


def test_carriage_return_and_newline_split_across_chunks_make_one_line_break() -> None:
    sink = OutputSink()
    sink.feed(b"a\r")
    sink.feed(b"\nb")
    summary = sink.summary()
    assert summary.output == "a\nb"
    assert summary.total_lines == 2


def test_trailing_carriage_return_becomes_a_line_break_on_flush() -> None:
    sink = OutputSink()
    sink.feed(b"50%\r100%\r")
    assert sink.summary().output == "50%\n100%"
    sink.flush()
    assert sink.summary().output == "50%\n100%\n"


def test_emoji_split_across_chunks_is_decoded_whole() -> None:
    emoji = "😀".encode()
    assert feed_all(OutputSink(), b"x" + emoji[:1], emoji[1:3], emoji[3:] + b"y") == "x😀y"


def test_invalid_utf8_is_replaced() -> None:
    assert feed_all(OutputSink(), b"ok\xff!") == "ok\ufffd!"


def test_incomplete_character_at_the_end_is_replaced_on_flush() -> None:
    sink = OutputSink()
    sink.feed(b"ok\xe2\x82")
    assert sink.summary().output == "ok"
    sink.flush()
    assert sink.summary().output == "ok\ufffd"


def test_ansi_escape_split_across_chunks_is_stripped() -> None:
    chunks = (b"\x1b[3", b"1mred\x1b", b"[0m plain \x1b", b"[1;", b"32mbold\x1b[0m\n")
    assert feed_all(OutputSink(), *chunks) == "red plain bold\n"


def test_osc_terminator_split_across_chunks_is_stripped() -> None:
    assert feed_all(OutputSink(), b"a\x1b]0;title\x1b", b"\\b") == "ab"


def test_terminal_control_sequences_and_control_characters_are_removed() -> None:
    data = (
        b"\x1b]0;window title\x07"  # OSC ended by BEL
        b"\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\ "  # hyperlink ended by ST
        b"\x1b_Gf=100;AAAA\x1b\\"  # kitty graphics (APC)
        b"\x1bPq#0;2;0;0;0~-\x1b\\"  # sixel (DCS)
        b"\x1b(B\x1b7\x1b=\x1b[2K\x1b[?25l"  # charset, save cursor, keypad, erase, hide cursor
        b"bell\x07 back\x08 nul\x00 c1\xc2\x9b\tend\n"
    )
    assert feed_all(OutputSink(), data) == "link bell back nul c1\tend\n"


def test_unfinished_escape_sequence_is_dropped_on_flush() -> None:
    sink = OutputSink()
    sink.feed(b"ok\x1b[3")
    sink.flush()
    assert sink.summary().output == "ok"


def test_never_terminated_escape_string_does_not_grow_memory() -> None:
    sink = OutputSink()
    sink.feed(b"before\x1b_G")
    for _ in range(100):
        sink.feed(b"A" * 4096)
    assert sink.retained_bytes < 2048
    sink.feed(b"\x1b\\after")
    assert sink.summary().output == "beforeafter"


# -- per-line column cap ------------------------------------------------------------------------


def test_long_line_is_cut_to_max_columns_with_an_ellipsis() -> None:
    sink = OutputSink(max_columns=10)
    sink.feed(b"abcdefghijklmnop\nxy\n")
    summary = sink.summary()
    assert summary.output == "abcdefg…\nxy\n"
    assert summary.column_dropped_bytes == 9
    assert summary.column_truncated_lines == 1
    assert summary.truncated


def test_line_of_exactly_max_columns_is_kept_whole() -> None:
    sink = OutputSink(max_columns=10)
    sink.feed(b"abcdefghij\n")
    summary = sink.summary()
    assert summary.output == "abcdefghij\n"
    assert not summary.truncated


def test_column_cap_carries_across_chunks() -> None:
    sink = OutputSink(max_columns=10)
    for chunk in (b"abcdef", b"ghijkl", b"mn\nok\nxyz", b"0123456789A", b"BC\n"):
        sink.feed(chunk)
    summary = sink.summary()
    assert summary.output == "abcdefg…\nok\nxyz0123…\n"
    assert summary.column_truncated_lines == 2
    assert summary.column_dropped_bytes == (14 - 7) + (16 - 7)


def test_column_cap_decides_bytes_near_the_cap_only_when_the_line_ends_or_overflows() -> None:
    fits = OutputSink(max_columns=10)
    fits.feed(b"abcdefghi")
    assert fits.summary().output == "abcdefghi"
    fits.feed(b"j\n")
    assert fits.summary().output == "abcdefghij\n"

    overflows = OutputSink(max_columns=10)
    overflows.feed(b"abcdefghi")
    overflows.feed(b"jk\n")
    assert overflows.summary().output == "abcdefg…\n"


def test_column_cap_never_splits_a_multibyte_character() -> None:
    sink = OutputSink(max_columns=10)
    sink.feed("aaaaaa€€€\n".encode())
    assert sink.summary().output == "aaaaaa…\n"


# -- footer ---------------------------------------------------------------------------------------


def test_footer_is_none_when_nothing_was_truncated() -> None:
    sink = OutputSink()
    sink.feed(b"fine\n")
    assert truncation_footer(sink.summary(), "ex_1") is None


def test_footer_names_head_and_tail_ranges_and_the_elided_middle() -> None:
    sink = OutputSink(head_bytes=10, tail_bytes=10)
    sink.feed(numbered_lines(1000))
    assert truncation_footer(sink.summary(), "ex_1") == (
        "[Showing lines 1-2 and 999-1001 of 1001; 996 middle lines (4.9KB) elided."
        " Read artifact://ex_1 for full output]"
    )


def test_footer_formats_thousands_and_a_single_middle_line() -> None:
    many = OutputSink(head_bytes=12, tail_bytes=12)
    many.feed(numbered_lines(3000, b"L%04d\n"))
    assert "; 2,996 middle lines (" in (truncation_footer(many.summary(), "ex_1") or "")

    one = OutputSink(head_bytes=10, tail_bytes=10)
    one.feed(b"abcd\n" * 5)
    assert truncation_footer(one.summary(), "ex_1") == (
        "[Showing lines 1-2 and 4-6 of 6; 1 middle line (5B) elided."
        " Read artifact://ex_1 for full output]"
    )


def test_footer_uses_the_tail_form_without_a_head_window() -> None:
    sink = OutputSink(head_bytes=0, tail_bytes=10)
    sink.feed(numbered_lines(1000))
    assert truncation_footer(sink.summary(), "ex_1") == (
        "[Showing lines 999-1001 of 1001. Read artifact://ex_1 for full output]"
    )


def test_footer_mentions_the_column_cap_when_it_fired() -> None:
    sink = OutputSink(max_columns=10)
    sink.feed(b"abcdefghijklmnop\n")
    assert truncation_footer(sink.summary(), "ex_1") == (
        "[Some lines truncated to 10 chars. Read artifact://ex_1 for full output]"
    )


def test_format_bytes_uses_b_kb_and_mb() -> None:
    assert format_bytes(1023) == "1023B"
    assert format_bytes(1536) == "1.5KB"
    assert format_bytes(3 * 1024 * 1024) == "3.0MB"
