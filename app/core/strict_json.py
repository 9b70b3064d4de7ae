"""Request bodies parsed as strict JSON (RFC 8259), never Python's lenient superset.

`json.loads` accepts `NaN`, `Infinity` and `-Infinity`, turns `1e999` into an infinite float
and keeps a lone `\\udcff` escape as a surrogate that no UTF-8 encoder will write back. Each
of these got past validation and failed only when the answer was encoded (a 500, with the
command already running). Here each is a JSONDecodeError, which the API answers with 422.
"""

from __future__ import annotations

import array
import itertools
import json
import math
import re
from typing import Any

from app.core.limits import ENV_MAX_BYTES

# Deeper nesting is no request this API takes; it would only cost recursion.
MAX_DEPTH = 64
# Nor more arrays and objects: each costs the parser ~0.25 µs on the event loop, and a body of
# nothing else holds half a million per MiB (~150 ms; RELIABILITY.md, "One request against
# all the others").
MAX_CONTAINERS = 10_000
# Nor more members of objects: a member the schema refuses (an unknown name, a value of the
# wrong type) is one validation error each, ~5 µs of building and reporting on the loop.
MAX_MEMBERS = 10_000


# Room for the largest field any request has besides the command and the env: an input
# frame's 1 MiB.
_BODY_ROOM = 1024 * 1024


def json_body_limit(max_command_bytes: int) -> int:
    """The largest JSON request body, or WebSocket frame, taken: 1 MiB, plus a command and an
    env at their size limits written all in `\\u00XX` escapes (6 bytes each); 4.375 MiB with
    the default 64 KiB commands."""
    return _BODY_ROOM + 6 * (max_command_bytes + ENV_MAX_BYTES)


class TooManyValuesError(json.JSONDecodeError):
    """More arrays and objects, or object members, than the caller takes."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


# Where a lone surrogate could come from: valid UTF-8 holds none, so only an escape makes one.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_NOT_BRACKETS = bytes(byte for byte in range(256) if byte not in b"[]{}")
# Openers to 1, closers to -1 (as signed bytes): the running sum is the depth.
_DEPTH_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")


def loads_strict(body: bytes) -> Any:
    """Parse a request body; raises json.JSONDecodeError for anything RFC 8259 refuses.

    Runs on the event loop, so the checks after the parse are C-speed scans of the text, not
    a walk of the result in Python, which cost 200 ms per MiB of `[0,0,…]`
    (RELIABILITY.md, "One request against all the others")."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise json.JSONDecodeError("body is not valid UTF-8", "", error.start) from None
    check_counts(text)
    try:
        value = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except json.JSONDecodeError:
        raise
    except (ValueError, RecursionError) as error:
        raise json.JSONDecodeError(str(error) or "invalid JSON", text, 0) from None
    if _SURROGATE_ESCAPE.search(text) is not None:
        _check_strings(value, text)
    if text.count("[") + text.count("{") > MAX_DEPTH:
        _check_depth(text)
    return value


def _outside_strings(text: str) -> str:
    """`text` without its strings. Once escaped backslashes and escaped quotes are gone, every
    quote left opens or closes a string; str methods only (C speed), where a regex took
    40 ms per MiB of short strings."""
    plain = text.replace("\\\\", "").replace('\\"', "")
    return "".join(plain.split('"')[0::2])


def check_counts(
    text: str, *, max_containers: int = MAX_CONTAINERS, max_members: int = MAX_MEMBERS
) -> None:
    """At most `max_containers` arrays and objects and `max_members` members in the JSON
    `text` (TooManyValuesError), what is in strings not counted (a command may hold any number
    of brackets and colons); before it is parsed, in time linear in it at C speed."""
    if text.count("[") + text.count("{") <= max_containers and text.count(":") <= max_members:
        return
    bare = _outside_strings(text)
    if bare.count("[") + bare.count("{") > max_containers:
        raise TooManyValuesError(f"more than {max_containers} arrays and objects", text, 0)
    if bare.count(":") > max_members:
        raise TooManyValuesError(f"more than {max_members} object members", text, 0)


def _check_strings(value: Any, text: str) -> None:
    """Every string (key or value) must be encodable as UTF-8: no lone surrogate. (The C
    encoder writes them all; a lone surrogate in any of them fails the UTF-8 encoding.)"""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise json.JSONDecodeError(
            "a string holds a lone UTF-16 surrogate escape (\\ud800-\\udfff)", text, 0
        ) from None


def _check_depth(text: str) -> None:
    """No more than MAX_DEPTH arrays and objects inside one another (`text` is valid JSON)."""
    # Outside strings, JSON is ASCII.
    brackets = _outside_strings(text).encode("ascii").translate(None, _NOT_BRACKETS)
    steps = array.array("b", brackets.translate(_DEPTH_STEPS))
    if max(itertools.accumulate(steps), default=0) > MAX_DEPTH:
        raise json.JSONDecodeError(f"nested deeper than {MAX_DEPTH} levels", text, 0)
