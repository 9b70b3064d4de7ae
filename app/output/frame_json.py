"""The JSON text of stream frames. Output frames are most of what a stream sends, so theirs is
built by hand: the text is escaped on its UTF-8 bytes with `bytes.replace` (memchr-fast)
instead of the json module's escaping loop, which takes ≈ 150-450 µs per 64 KiB frame on the
development VM. The result is the text `FRAME_ENCODER` writes, character for character
(tests/test_frame_encoding.py): the frame format of docs/streaming.md is unchanged.
"""

from __future__ import annotations

import json
from typing import Any, Final

# ensure_ascii=False: non-ASCII text travels as itself, not as six-byte escapes.
FRAME_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))

OUTPUT_FRAME_KEYS: Final = frozenset({"type", "stream", "offset", "data", "encoding"})
_JSON_ESCAPES: Final = (
    (b"\\", b"\\\\"),  # first: the escapes below add backslashes
    (b'"', b'\\"'),
    (b"\n", b"\\n"),
    (b"\r", b"\\r"),
    (b"\t", b"\\t"),
    (b"\x1b", b"\\u001b"),  # terminal output is full of escape sequences
)
# The other control characters JSON must escape: rare, left to the json module. Looked for one
# by one (`in` is memchr: 28 of them cost ≈ 60 % of one `bytes.translate` over the text).
_RARE_CONTROLS: Final = tuple(bytes([c]) for c in range(0x20) if c not in (0x09, 0x0A, 0x0D, 0x1B))


def _escaped(text: str) -> str:
    """The inside of `text`'s JSON string literal (without the quotes); `text` itself, not a
    copy, when nothing needs escaping."""
    data = text.encode("utf-8", "surrogatepass")
    if any(control in data for control in _RARE_CONTROLS):
        return FRAME_ENCODER.encode(text)[1:-1]
    escaped_any = False
    for raw, escaped in _JSON_ESCAPES:
        if raw in data:
            data = data.replace(raw, escaped)
            escaped_any = True
    return data.decode("utf-8", "surrogatepass") if escaped_any else text


def json_string(text: str) -> str:
    """`text` as a JSON string literal, as `json.dumps(text, ensure_ascii=False)` writes it."""
    return f'"{_escaped(text)}"'


# Characters JSON leaves raw in a string but that Python's `str.splitlines()` (and so httpx's
# `iter_lines()`) takes for line breaks: NEL, LINE SEPARATOR, PARAGRAPH SEPARATOR. A
# line-delimited format (the NDJSON runner, an SSE `data:` line) writes them as escapes, so
# that each item is one line for any line splitter (RELIABILITY.md, "Bytes and text a
# command plants").
_LINE_SEPARATORS: Final = (("\x85", "\\u0085"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))


def one_line(json_text: str) -> str:
    """`json_text` (compact JSON, so without a raw line feed) with NEL, U+2028 and U+2029
    escaped: the same value, on one line for every line splitter."""
    if json_text.isascii():
        return json_text
    for raw, escaped in _LINE_SEPARATORS:
        if raw in json_text:
            json_text = json_text.replace(raw, escaped)
    return json_text


def encode_output_frame(frame: dict[str, Any]) -> str:
    """An output frame (`type`, `stream`, `offset`, `data`, maybe `encoding`) as JSON text."""
    head = (
        f'{{"type":"output","stream":{json_string(frame["stream"])},"offset":{int(frame["offset"])}'
    )
    if frame.get("encoding") == "base64":
        # Its data is base64 (app/output/framing.py), whose alphabet (A-Z a-z 0-9 + / =) has
        # nothing JSON escapes: taken as is, without a scan.
        return f'{head},"data":"{frame["data"]}","encoding":"base64"}}'
    # One copy of the (large) data: into the frame's text.
    return f'{head},"data":"{_escaped(frame["data"])}"}}'
