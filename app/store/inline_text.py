"""How an execution's model-facing text is kept without repeating its inline output.

The text block (docs/api.md#the-text-block) begins with the inline output: up to 70 KiB that
the `output` column already holds. Storing the whole text doubled every row (issue 25: 938 MB
for 8,620 executions), so a row keeps only what the text adds after the output, in
`text_after_output`, and the full text is rebuilt on reading. The split is exact by
construction: it is made only when the text does begin with the output, so a text that does
not (an approval's notice, a row written before revision 0015 that did not match) stays whole
in `text`. Migration 0015 applies the same rule to the rows already stored.
"""

from __future__ import annotations

from typing import Any

from app.store.models import Execution

NO_OUTPUT = "(no output)"


def text_body(output: str) -> str:
    """What the text block starts with: the output without its final newlines (they would add
    a third line break before the notices), or a placeholder when there is none."""
    return output.rstrip("\n") or NO_OUTPUT


def text_columns(output: str | None, text: str | None) -> dict[str, str | None]:
    """The `text` and `text_after_output` values that record `text` beside `output`."""
    if text is not None:
        body = text_body(output or "")
        if text.startswith(body):
            return {"text": None, "text_after_output": text[len(body) :]}
    return {"text": text, "text_after_output": None}


def without_repeated_output(values: dict[str, Any]) -> dict[str, Any]:
    """Column values to write, with a text that repeats the output being written stored as
    what follows it. A text written without the output keeps its whole form: the row's
    output is not known here. Returns a new dict: callers keep theirs (the in-memory record
    is updated from it)."""
    if "text" not in values:
        return values
    if "output" not in values:
        return {**values, "text_after_output": None}
    return {**values, **text_columns(values["output"], values["text"])}


def recorded_text(record: Execution) -> str | None:
    """The text block recorded when the execution ended, whole; None when none was. A whole
    `text` wins: an in-memory record updated with the values of its final write has it."""
    if record.text is not None or record.text_after_output is None:
        return record.text
    return text_body(record.output or "") + record.text_after_output
