"""Output frames are JSON-encoded by hand (app/executions/viewer.py, for speed): the text must be
the json module's, character for character, whatever the data."""

from __future__ import annotations

import base64
import json

from hypothesis import given
from hypothesis import strategies as st

from app.executions.viewer import encode_frame
from app.output.frame_json import json_string
from app.output.framing import OutputFrame

REFERENCE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))

# Every character class the escaping treats differently, and the rest of Unicode.
TEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from('\\"\n\r\t\x1b\x00\x07\x08\x0c\x1f\x7f é€😀\u2028'),
        st.characters(codec="utf-8"),
    )
)


@given(TEXT)
def test_a_json_string_is_what_the_json_module_writes(text: str) -> None:
    assert json_string(text) == REFERENCE.encode(text)
    assert json.loads(json_string(text)) == text


@given(TEXT, st.sampled_from(["stdout", "stderr", "pty"]), st.integers(0, 2**53))
def test_an_output_frame_is_encoded_as_the_json_module_would(
    text: str, stream: str, offset: int
) -> None:
    frame: OutputFrame = {"type": "output", "stream": stream, "offset": offset, "data": text}
    assert encode_frame(frame) == REFERENCE.encode(frame)


@given(st.binary(), st.sampled_from(["stdout", "stderr", "pty"]), st.integers(0, 2**53))
def test_a_base64_output_frame_is_encoded_as_the_json_module_would(
    data: bytes, stream: str, offset: int
) -> None:
    # Its data is base64 (app/output/framing.py), which is taken as is, without a scan.
    frame: OutputFrame = {
        "type": "output",
        "stream": stream,
        "offset": offset,
        "data": base64.b64encode(data).decode("ascii"),
        "encoding": "base64",
    }
    assert encode_frame(frame) == REFERENCE.encode(frame)


def test_a_large_terminal_frame_round_trips() -> None:
    text = ('\x1b[31mred\x1b[0m "quoted" back\\slash\r\n' * 3000)[: 64 * 1024]
    frame: OutputFrame = {"type": "output", "stream": "pty", "offset": 7, "data": text}
    assert encode_frame(frame) == REFERENCE.encode(frame)
    assert json.loads(encode_frame(frame))["data"] == text
