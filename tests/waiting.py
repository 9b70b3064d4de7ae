"""One bounded wait for conditions that no event announces (a row pruned, a process gone)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx

T = TypeVar("T")


def eventually(
    probe: Callable[[], T], *, what: str, within: float = 10.0, interval: float = 0.02
) -> T:
    """`probe()`'s first truthy result, polling every `interval` s; fails after `within` s."""
    deadline = time.monotonic() + within
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} did not happen within {within:g} s")
        time.sleep(interval)


def pending_approval_for(client: httpx.Client, command: str, within: float = 10) -> dict[str, Any]:
    """The pending approval of `command`, once the server has asked for it."""

    def find() -> dict[str, Any] | None:
        listed = client.get("/v1/approvals", params={"state": "pending"})
        assert listed.status_code == 200
        matches = [item for item in listed.json()["data"] if item["command"] == command]
        return matches[0] if matches else None

    found = eventually(find, what=f"a pending approval for {command!r}", within=within)
    assert found is not None
    return found
