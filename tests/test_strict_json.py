"""`loads_strict` checks a parsed body with scans of its text (C speed) instead of a walk of the
result in Python, which cost 200 ms per MiB of `[0,0,…]` on the event loop: it must accept and
refuse exactly what the walk did (lone surrogates anywhere, nesting past MAX_DEPTH)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.strict_json import MAX_DEPTH, loads_strict


def walked(value: Any, depth: int = 0) -> str | None:
    """The old definition: why the parsed `value` is refused, or None."""
    if depth > MAX_DEPTH:
        return "deep"
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "surrogate"
        return None
    if isinstance(value, dict):
        for key, child in value.items():
            reason = walked(key, depth) or walked(child, depth + 1)
            if reason:
                return reason
    if isinstance(value, list):
        for child in value:
            reason = walked(child, depth + 1)
            if reason:
                return reason
    return None


# Text with the characters the scans look for: quotes, backslashes, brackets, `\u` escapes of
# surrogates (lone and paired) and of ordinary characters.
texts = st.text(
    alphabet=st.sampled_from(['"', "\\", "[", "]", "{", "}", ":", "a", "\ud800", "\udc00", "é"])
)
values = st.recursive(
    st.none() | st.integers() | texts,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(texts, children, max_size=3),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(values, st.booleans())
def test_it_refuses_what_the_walk_refused(value: Any, ascii_escapes: bool) -> None:
    body = json.dumps(value, ensure_ascii=ascii_escapes).encode("utf-8", "surrogatepass")
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return  # a raw surrogate is not UTF-8: refused before any of this
    parsed = json.loads(body)  # (a pair of surrogates in `value` is one character here)
    if walked(parsed) is None:
        assert loads_strict(body) == parsed
    else:
        with pytest.raises(json.JSONDecodeError):
            loads_strict(body)


@pytest.mark.parametrize(
    ("body", "accepted"),
    [
        (b'"\\ud83d\\ude00"', True),  # a pair is a character
        (b'"\\\\ud800"', True),  # a backslash, then the letters `ud800`
        (b'{"\\udc00": 1}', False),
        (b'["\\ud800x"]', False),
        (b"[" * MAX_DEPTH + b"]" * MAX_DEPTH, True),
        (b"[" * (MAX_DEPTH + 2) + b"]" * (MAX_DEPTH + 2), False),
        (b'{"a": "' + b"[" * 500 + b'"}', True),  # brackets in strings are text
        # ... also after escaped quotes and backslashes
        (json.dumps({"a": '\\"' + "[" * 100, "b": "\\" + "{" * 100}).encode(), True),
        (json.dumps([['\\"[']] * 40000).encode(), False),  # 40,001 arrays
        (json.dumps({f"k{i}": '\\":' for i in range(10_001)}).encode(), False),  # members
        (json.dumps({"a": '\\":' * 20_000}).encode(), True),
    ],
)
def test_edges(body: bytes, accepted: bool) -> None:
    if accepted:
        loads_strict(body)
    else:
        with pytest.raises(json.JSONDecodeError):
            loads_strict(body)


def test_a_wide_body_is_accepted_as_parsed() -> None:
    # What it costs next to the parser (the walk took 4-5 times the parse) is
    # bench/bench_strict_json.py's figure, not a unit test's.
    body = b"[" + b",".join([b"0"] * 500_000) + b"]"
    assert loads_strict(body) == json.loads(body)
