"""Request bodies parsed as strict JSON (RFC 8259), never Python's lenient superset.

`json.loads` accepts `NaN`, `Infinity` and `-Infinity`, turns `1e999` into an infinite float
and keeps a lone `\\udcff` escape as a surrogate that no UTF-8 encoder will write back. Each
of these got past validation and failed only when the answer was encoded (a 500, with the
command already running). Here each is a JSONDecodeError, which the API answers with 422.
"""

from __future__ import annotations

import json
import math
from typing import Any

# Deeper nesting is no request this API takes; it would only cost recursion.
MAX_DEPTH = 64


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def loads_strict(body: bytes) -> Any:
    """Parse a request body; raises json.JSONDecodeError for anything RFC 8259 refuses."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise json.JSONDecodeError("body is not valid UTF-8", "", error.start) from None
    try:
        value = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except json.JSONDecodeError:
        raise
    except (ValueError, RecursionError) as error:
        raise json.JSONDecodeError(str(error) or "invalid JSON", text, 0) from None
    _check_strings(value, text)
    return value


def _check_strings(value: Any, text: str) -> None:
    """Every string (key or value) must be encodable as UTF-8: no lone surrogate."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise json.JSONDecodeError(f"nested deeper than {MAX_DEPTH} levels", text, 0)
        if isinstance(item, str):
            _check_text(item, text)
        elif isinstance(item, dict):
            for key, child in item.items():
                _check_text(key, text)
                stack.append((child, depth + 1))
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)


def _check_text(item: str, text: str) -> None:
    try:
        item.encode("utf-8")
    except UnicodeEncodeError:
        raise json.JSONDecodeError(
            "a string holds a lone UTF-16 surrogate escape (\\ud800-\\udfff)", text, 0
        ) from None
