"""The model-facing text block (docs/api.md#the-text-block): body, blank line, wall time,
notices, exit code."""

from __future__ import annotations

from app.executions.result_text import backgrounded_text, final_text, timeout_notice
from app.store.models import ExecutionState


def test_body_then_one_blank_line_then_wall_time() -> None:
    text = final_text(
        body="hello\nLinux\n",
        wall_time_ms=12.0,
        notices=[],
        state=ExecutionState.completed,
        exit_code=0,
        footer=None,
    )
    assert text == "hello\nLinux\n\nWall time: 0.01 seconds"


def test_empty_body_reads_no_output_and_nonzero_exit_comes_last() -> None:
    text = final_text(
        body="",
        wall_time_ms=1500.0,
        notices=["Timeout clamped to 1s (requested 0.5s; allowed range 1-3600s)."],
        state=ExecutionState.failed,
        exit_code=3,
        footer=None,
    )
    assert text == (
        "(no output)\n\nWall time: 1.50 seconds\n"
        "Timeout clamped to 1s (requested 0.5s; allowed range 1-3600s).\n\n"
        "Command exited with code 3"
    )


def test_truncation_footer_ends_the_body_before_the_wall_time() -> None:
    text = final_text(
        body="tail\n",
        wall_time_ms=0.0,
        notices=[],
        state=ExecutionState.completed,
        exit_code=0,
        footer="[Showing lines 2-3 of 3. Read artifact://ex_x for full output]",
    )
    assert text == (
        "tail\n\n[Showing lines 2-3 of 3. Read artifact://ex_x for full output]\n\n"
        "Wall time: 0.00 seconds"
    )


def test_timeout_notice_keeps_fractions_of_a_second() -> None:
    assert timeout_notice(1) == "Command timed out after 1 seconds"
    assert timeout_notice(0.5) == "Command timed out after 0.5 seconds"
    assert timeout_notice(None) == "Command timed out"


def test_backgrounded_text_has_preview_notices_then_the_job_line() -> None:
    assert backgrounded_text(preview="start\n", notices=["n1"], execution_id="ex_1") == (
        "start\n\nn1\n\nBackgrounded as job ex_1; result will be delivered automatically."
    )
