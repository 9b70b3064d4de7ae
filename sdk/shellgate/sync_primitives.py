"""The blocking twin of async_primitives.py, and the only hand-written part of the sync client
(the rest, sync_*.py, is generated from async_*.py by sdk/generate_sync.py): it sleeps and
locks with the standard library, for one reading thread and any number of sending ones, and
does local file work in the calling thread."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from threading import Lock
from time import sleep
from typing import TypeVar, TypeVarTuple

from shellgate import transfers
from shellgate.transfers import UploadSource

__all__ = ["Lock", "run_blocking", "sleep", "upload_content"]

T = TypeVar("T")
Args = TypeVarTuple("Args")


def run_blocking(function: Callable[[*Args], T], *args: *Args) -> T:
    return function(*args)


def upload_content(source: UploadSource) -> tuple[transfers.UploadBody, Iterator[bytes]]:
    """The upload's body and its chunks, hashed as they are sent."""
    body = transfers.upload_body(source)
    return body, body.hashed()
