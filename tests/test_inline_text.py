"""The text block is stored without the output it begins with, and rebuilt exactly
(app/store/inline_text.py); a text that does not begin with it is kept whole."""

from __future__ import annotations

import pytest

from app.executions.result_text import final_text
from app.store.inline_text import (
    recorded_text,
    text_body,
    text_columns,
    without_repeated_output,
)
from app.store.models import Execution, ExecutionState


def execution(**columns: object) -> Execution:
    return Execution(
        id="ex_1", owner="alice", command="x", original_command="x", cwd="/", state="completed",
        artifact_path="/a", **columns,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("output", "state", "exit_code", "footer"),
    [
        ("hello\n", ExecutionState.completed, 0, None),
        ("", ExecutionState.completed, 0, None),
        ("\n\n\n", ExecutionState.completed, 0, None),
        ("broken\n", ExecutionState.failed, 3, None),
        ("1\n2\n…\n99\n", ExecutionState.completed, 0, "[Read artifact://ex_1 for full output]"),
        ("(no output)\n", ExecutionState.completed, 0, None),
    ],
)
def test_every_final_text_is_stored_as_what_follows_its_output_and_rebuilt_exactly(
    output: str, state: ExecutionState, exit_code: int, footer: str | None
) -> None:
    text = final_text(
        body=output,
        wall_time_ms=12.0,
        notices=["a notice"],
        state=state,
        exit_code=exit_code,
        footer=footer,
    )
    columns = text_columns(output, text)

    assert columns["text"] is None
    assert columns["text_after_output"] == text[len(text_body(output)) :]
    assert recorded_text(execution(output=output, **columns)) == text


def test_a_text_that_does_not_begin_with_the_output_is_kept_whole() -> None:
    columns = text_columns(None, "Approval denied by carol: no")

    assert columns == {"text": "Approval denied by carol: no", "text_after_output": None}
    assert recorded_text(execution(**columns)) == "Approval denied by carol: no"


def test_a_text_written_without_its_output_is_kept_whole() -> None:
    values = {"state": "lost", "text": "(no output)\n\nlost"}

    written = without_repeated_output(values)

    assert written == {**values, "text_after_output": None}
    assert values == {"state": "lost", "text": "(no output)\n\nlost"}


def test_values_with_output_and_text_are_written_with_the_output_once() -> None:
    values = {"output": "x" * 1000 + "\n", "text": "x" * 1000 + "\n\nWall time: 0.01 seconds"}

    written = without_repeated_output(values)

    assert written["text"] is None
    assert written["text_after_output"] == "\n\nWall time: 0.01 seconds"
    assert values["text"] == "x" * 1000 + "\n\nWall time: 0.01 seconds"


def test_a_whole_text_wins_over_a_split_one_on_a_record_updated_in_memory() -> None:
    record = execution(output="old\n", text_after_output="\n\nold end", text="new whole text")

    assert recorded_text(record) == "new whole text"


def test_no_text_recorded_reads_as_none() -> None:
    assert recorded_text(execution(output="hi\n")) is None
