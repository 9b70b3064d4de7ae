"""Searching an execution's whole log on the server (`GET /v1/executions/{id}/search`): a
browser's terminal holds only its scrollback, so `line 5:` of a 30,000-line log found nothing
there. Blocking (a worker thread): the log is read in chunks from disk, never whole.

A match is reported once per line, at the byte offset where the text begins, with its line
number (1-based; unknown past the evicted middle of a log over the artifact cap, whose lines
were never counted) and the line as text: decoded as UTF-8 with replacement, terminal escape
sequences removed, and cut to a window around the
match. The search is on the raw bytes; `ignore_case` folds ASCII letters only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from app.output.artifact_log import ArtifactLog

CHUNK_BYTES = 1 << 20
# A line longer than this is searched in pieces of this size (a match across two pieces is
# missed): one line of 200 MB of base64 must not be held whole.
MAX_LINE_BYTES = 1 << 20
# How much of a matching line is shown, around the match.
SHOWN_CHARACTERS = 240
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]")


@dataclass(frozen=True)
class LogMatch:
    offset: int  # the byte offset of the match in the log (as `/output` counts them)
    line: int | None  # 1-based; None past an evicted middle
    text: str  # the line, cleaned, around the match


@dataclass
class LogSearch:
    matches: list[LogMatch] = field(default_factory=list)
    # More matches than the limit: the search stopped at the limit's.
    truncated: bool = False
    # The evicted middle it skipped ([start, end) offsets), when the log is over the cap.
    skipped: tuple[int, int] | None = None
    searched_bytes: int = 0


def search_log(log: ArtifactLog, query: str, *, ignore_case: bool, limit: int) -> LogSearch:
    """Every line of `log` holding `query` (UTF-8), up to `limit` of them."""
    needle = query.encode()
    if ignore_case:
        needle = needle.lower()
    result = LogSearch()
    offset, line_number, total = 0, 1, log.total_bytes
    pending, pending_start = b"", 0  # the line begun in earlier chunks, and its offset
    lines_known = True
    while offset < total:
        kept = log.next_available(offset)
        if kept != offset:
            # The evicted middle: what came before it ends there, and its lines are uncounted.
            if pending and _scan_line(
                result, pending, pending_start, line_number, needle, limit, ignore_case
            ):
                return result
            result.skipped = (offset, kept)
            offset, pending, pending_start, lines_known = kept, b"", kept, False
            continue
        chunk = log.read(offset, CHUNK_BYTES)
        if not chunk:
            break
        result.searched_bytes += len(chunk)
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            line = pending + chunk[start:end]
            number = line_number if lines_known else None
            if _scan_line(result, line, pending_start, number, needle, limit, ignore_case):
                return result
            line_number += 1
            start, pending, pending_start = end + 1, b"", offset + end + 1
        pending += chunk[start:]
        if len(pending) > MAX_LINE_BYTES:
            number = line_number if lines_known else None
            if _scan_line(result, pending, pending_start, number, needle, limit, ignore_case):
                return result
            pending_start += len(pending)
            pending = b""
        offset += len(chunk)
    if pending:
        number = line_number if lines_known else None
        _scan_line(result, pending, pending_start, number, needle, limit, ignore_case)
    return result


def _scan_line(
    result: LogSearch,
    line: bytes,
    start: int,
    number: int | None,
    needle: bytes,
    limit: int,
    ignore_case: bool,
) -> bool:
    """Record `line`'s match, if it has one; True once past `limit` (stop)."""
    at = (line.lower() if ignore_case else line).find(needle)
    if at == -1:
        return False
    if len(result.matches) >= limit:
        result.truncated = True
        return True
    result.matches.append(LogMatch(start + at, number, _shown(line, at, len(needle))))
    return False


def _shown(line: bytes, at: int, length: int) -> str:
    """The line as a reader sees it, cut to a window around the match."""
    half = SHOWN_CHARACTERS // 2
    window = line[max(0, at - 4 * half) : at + length + 4 * half]
    # A carriage return inside (a progress bar redrawn) shown as a space: the match may lie
    # in the part a terminal would have overwritten.
    text = _ESCAPES.sub("", window.decode("utf-8", "replace")).rstrip("\r").replace("\r", " ")
    if len(text) <= SHOWN_CHARACTERS:
        return text
    needle_text = line[at : at + length].decode("utf-8", "replace")
    found = text.find(needle_text)
    begin = max(0, found - half) if found != -1 else 0
    return text[begin : begin + SHOWN_CHARACTERS]
