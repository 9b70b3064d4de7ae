"""An execution's row holds its inline output once: the text block, which begins with that
output, is stored as what it adds after it (issue 25: the two copies made 938 MB of a soak's
registry). The API shows the text whole, as before."""

from __future__ import annotations

import pytest
from sqlmodel import Session

from app.store import crud
from app.store.models import Execution
from tests.conftest import LiveServer, run_foreground

COMMANDS = {
    "short": "printf 'one\\ntwo\\n'",
    # Past the inline window: the text adds the truncation footer.
    "truncated": "seq 1 100000",
    "failed": "echo broken; exit 3",
    "silent": "true",
}


def stored(server: LiveServer, execution_id: str) -> Execution:
    with Session(server.database_engine()) as session:
        record = crud.get_execution(session, execution_id=execution_id)
    assert record is not None
    return record


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_finished_execution_s_row_holds_its_inline_output_once(
    server: LiveServer, name: str
) -> None:
    with server.client() as client:
        answer = run_foreground(client, COMMANDS[name])
        shown = client.get(f"/v1/executions/{answer['id']}").json()
    output, text = str(answer["output"]), str(answer["text"])
    record = stored(server, str(answer["id"]))

    assert record.output == output
    assert record.text is None
    assert record.text_after_output is not None
    body = output.rstrip("\n") or "(no output)"
    assert text == body + record.text_after_output
    if output.strip():
        assert output.rstrip("\n") not in record.text_after_output
    assert (shown["output"], shown["text"]) == (output, text)


def test_a_truncated_row_keeps_only_the_footer_and_notices_beside_the_output(
    server: LiveServer,
) -> None:
    with server.client() as client:
        answer = run_foreground(client, COMMANDS["truncated"])
    record = stored(server, str(answer["id"]))

    assert answer["truncated"] is True
    assert record.text_after_output is not None
    assert record.text_after_output.startswith("\n\n[Showing lines")
    assert len(record.text_after_output) < 1024 < len(record.output or "")
