"""The bounded inline view of an execution's output (pure: no I/O).

`OutputSink` turns the merged raw byte stream of a process into what an agent reads: UTF-8
text without terminal control sequences, carriage-return progress frames turned into lines,
each line capped at `MAX_COLUMNS` bytes, and only a head window and a rolling tail window
kept in memory. The complete raw stream is the artifact's job (`app.output.artifact_log`).

Bytes that may still change meaning with the next chunk are held back between feeds: an
incomplete UTF-8 character, an unfinished escape sequence, a trailing `\\r` (it may be half of
`\\r\\n`). Call `flush()` once the process has exited so they are settled before the final
`summary()`.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass
from typing import Final

from app.core.utf8 import ceil_boundary, floor_boundary

HEAD_BYTES: Final = 20 * 1024
TAIL_BYTES: Final = 50 * 1024
MAX_COLUMNS: Final = 768

_ELLIPSIS: Final = "…".encode()
# An unfinished escape sequence is carried to the next chunk; past this size only the bytes that
# still decide anything are kept (see `_shorten_escape`), so a never-terminated one cannot grow
# memory.
_MAX_ESCAPE_CARRY: Final = 1024

# Printable text keeps \t, \n and \r (the last becomes a line break separately). ESC is
# deleted here too, after _ESCAPE_RE has removed the sequences it starts. bytes.translate
# deletes at ~1 GB/s where a regex character class scans at ~150 MB/s.
_C0_CONTROLS: Final = bytes([*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F])
# The same, one by one: looking for each (`in` is memchr) costs about half of a `translate`, so
# text without any (most of it) skips the translate and its copy.
_C0_CONTROL_BYTES: Final = tuple(bytes([control]) for control in _C0_CONTROLS)
_C1_CONTROL_RE: Final = re.compile(rb"\xc2[\x80-\x9f]")  # C1 controls, UTF-8 encoded
# Every byte after an introducer is removed whatever follows it, as a terminal does: a string
# (OSC, DCS…) ends at BEL/ST or is cancelled by any other ESC, which then starts a sequence
# of its own; a CSI or nF sequence that meets a byte it cannot hold loses its parameter and
# intermediate bytes all the same. So what a byte becomes is settled once the bytes before it
# are known, never by the ones after: the window is the same however reads split the stream,
# and an unfinished sequence can be carried in a few bytes (`_shorten_escape`).
_ESCAPE_RE: Final = re.compile(
    rb"\x1b(?:"
    rb"\[[0-?]*[ -/]*[@-~]?"  # CSI: colours, cursor moves, erases
    rb"|\][^\x07\x1b]*(?:\x07|\x1b\\|(?=\x1b))"  # OSC: titles, hyperlinks; ends with BEL or ST
    rb"|[PX^_][^\x1b]*(?:\x1b\\|(?=\x1b))"  # DCS, SOS, PM, APC: sixel and kitty graphics
    rb"|[ -/]+[0-~]?"  # nF: charset selection such as ESC ( B
    rb"|[0-~]"  # two-byte sequences: ESC 7, ESC M, ESC =
    rb")?"  # an ESC that starts nothing known goes alone
)
# The unfinished start of a sequence at the very end of a chunk.
_PARTIAL_ESCAPE_RE: Final = re.compile(
    rb"\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*\x1b?|[PX^_][^\x1b]*\x1b?|[ -/]*)\Z"
)
# A run of CRs is one progress-frame break; a CR right before LF is just a line ending.
# Spelled `\r\r*` rather than `\r+`: a literal first byte lets the regex engine skip to each
# CR with memchr instead of trying every position (x40 faster on binary output).
_CR_RE: Final = re.compile(rb"\r\r*\n?")


def format_bytes(n: int) -> str:
    """A short byte size for notices and footers: `512B`, `1.5KB`, `3.0MB`."""
    if n < 1024:
        return f"{n}B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f}KB"
    return f"{n / (1024 * 1024):.1f}MB"


@dataclass(frozen=True, slots=True)
class OutputSummary:
    """The inline output of an execution and the counters that describe what it omits."""

    output: str
    truncated: bool
    total_bytes: int  # raw bytes fed (the size of the artifact log)
    total_lines: int  # newlines + 1 in the sanitised text, 0 when there was none
    output_bytes: int  # UTF-8 bytes of the body (without the notice line)
    output_lines: int
    elided_bytes: int
    elided_lines: int
    column_dropped_bytes: int
    column_truncated_lines: int
    head_lines: int  # lines shown before the elision marker; 0 when there is no marker
    max_columns: int

    def record_fields(self) -> dict[str, str | int | bool]:
        """What the execution record keeps of it (the columns of the same names)."""
        return {
            "output": self.output,
            "total_bytes": self.total_bytes,
            "total_lines": self.total_lines,
            "output_bytes": self.output_bytes,
            "output_lines": self.output_lines,
            "elided_bytes": self.elided_bytes,
            "truncated": self.truncated,
        }


def truncation_footer(summary: OutputSummary, artifact_id: str) -> str | None:
    """The `[...]` line that tells the model what the body omits; None when it omits nothing."""
    if not summary.truncated:
        return None
    parts: list[str] = []
    total = summary.total_lines
    if summary.head_lines:
        tail_lines = summary.output_lines - summary.head_lines - 1
        elided = summary.elided_lines
        noun = "line" if elided == 1 else "lines"
        parts.append(
            f"Showing lines 1-{summary.head_lines} and {total - tail_lines + 1}-{total} of {total};"
            f" {elided:,} middle {noun} ({format_bytes(summary.elided_bytes)}) elided"
        )
    elif summary.elided_bytes:
        parts.append(f"Showing lines {total - summary.output_lines + 1}-{total} of {total}")
    if summary.column_truncated_lines:
        parts.append(f"Some lines truncated to {summary.max_columns} chars")
    parts.append(f"Read artifact://{artifact_id} for full output")
    return "[" + ". ".join(parts) + "]"


def _partial_escape_start(data: bytes) -> int | None:
    """Where an escape sequence cut off by the end of `data` begins, if one is."""
    last = data.rfind(b"\x1b")
    if last < 0:
        return None
    if last == len(data) - 1:
        # A lone final ESC may be the first half of the ST that ends an earlier OSC/DCS.
        previous = data.rfind(b"\x1b", 0, last)
        if previous >= 0 and _PARTIAL_ESCAPE_RE.match(data, previous):
            return previous
        return last
    return last if _PARTIAL_ESCAPE_RE.match(data, last) else None


def _shorten_escape(partial: bytes) -> bytes:
    """The unfinished sequence `partial`, cut to a few bytes that end it the same way.

    Every byte after the introducer is dropped whatever comes next (see `_ESCAPE_RE`), so
    only the introducer and the last byte still decide anything: a final ESC may be the
    start of the ST that ends a string, and a CSI's last byte says whether intermediates
    have begun (a parameter byte after one ends the sequence). Keeping exactly these keeps
    the output independent of where reads split a long sequence.
    """
    if len(partial) <= _MAX_ESCAPE_CARRY:
        return partial
    return partial[:2] + partial[-1:]


class OutputSink:
    """Bounded inline window over one execution's merged output.

    Memory is `head_bytes + 2 * tail_bytes` plus a few held-back bytes, whatever is fed.
    Not thread-safe: feed and summarise from one thread (or under one lock).
    """

    def __init__(
        self,
        head_bytes: int = HEAD_BYTES,
        tail_bytes: int = TAIL_BYTES,
        max_columns: int = MAX_COLUMNS,
    ) -> None:
        if head_bytes < 0 or tail_bytes < 1:
            raise ValueError("head_bytes must be >= 0 and tail_bytes >= 1")
        if 0 < max_columns <= len(_ELLIPSIS):
            raise ValueError(f"max_columns must be 0 (no cap) or > {len(_ELLIPSIS)}")
        self._head_limit = head_bytes
        self._tail_limit = tail_bytes
        self._max_columns = max_columns
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._carry = b""  # unfinished escape sequence / trailing CR, re-read with the next chunk
        self._head = bytearray()
        self._head_open = head_bytes > 0
        # Trimmed back to tail_bytes only once it doubles, so trimming is amortised.
        self._tail = bytearray()
        # The end of an open line that may still be replaced by the ellipsis (at most 6 bytes).
        self._held = b""
        self._column = 0  # bytes of the open line already passed to the windows
        self._dropping = False  # the open line hit the cap: drop until its newline
        self._total_bytes = 0
        self._kept_bytes = 0  # bytes passed to the windows
        self._newlines = 0
        self._saw_text = False
        self._column_dropped_bytes = 0
        self._column_truncated_lines = 0

    @property
    def retained_bytes(self) -> int:
        """Bytes the sink holds in memory (its windows and held-back pieces)."""
        return len(self._head) + len(self._tail) + len(self._held) + len(self._carry)

    def feed(self, chunk: bytes) -> None:
        """Take the next raw bytes of the merged stream, in arrival order."""
        if not chunk:
            return
        self._total_bytes += len(chunk)
        if chunk.isascii() and not self._decoder.getstate()[0]:
            # Nothing to decode (and no half character waiting): skip two copies.
            self._consume(chunk, final=False)
        else:
            self._consume(self._decoder.decode(chunk).encode(), final=False)

    def flush(self) -> None:
        """Settle held-back bytes at the end of the stream: an incomplete character becomes
        U+FFFD, a trailing CR a line break, an unfinished escape sequence is dropped.
        Feeding afterwards still works."""
        self._consume(self._decoder.decode(b"", final=True).encode(), final=True)

    def summary(self, notice: str | None = None) -> OutputSummary:
        """The inline output so far; cheap enough to call while still feeding."""
        if self._head_open:
            head, tail = bytes(self._head) + self._held, b""
        else:
            head, tail = bytes(self._head), bytes(self._tail) + self._held
            tail = tail[ceil_boundary(tail, max(0, len(tail) - self._tail_limit)) :]
        elided_bytes = self._kept_bytes + len(self._held) - len(head) - len(tail)
        total_lines = self._newlines + 1 if self._saw_text else 0
        head_lines = 0
        if elided_bytes > 0 and head:
            head_lines = head.count(b"\n") + (0 if head.endswith(b"\n") else 1)
            tail_lines = tail.count(b"\n") + 1 if tail else 0
            elided_lines = max(0, total_lines - head_lines - tail_lines)
            marker = (
                f"[…{elided_lines}ln elided…]"
                if elided_lines > 1
                else f"[…{elided_bytes}B elided…]"
            )
            body = b"".join(
                (
                    head,
                    b"" if head.endswith(b"\n") else b"\n",
                    marker.encode(),
                    b"" if tail.startswith(b"\n") else b"\n",
                    tail,
                )
            )
            output_lines = head_lines + 1 + tail_lines
        else:
            body = head + tail
            output_lines = body.count(b"\n") + 1 if body else 0
            elided_lines = max(0, total_lines - output_lines) if elided_bytes > 0 else 0
        prefix = f"[{notice}]\n" if notice else ""
        return OutputSummary(
            output=prefix + body.decode("utf-8", "replace"),
            truncated=elided_bytes > 0 or self._column_truncated_lines > 0,
            total_bytes=self._total_bytes,
            total_lines=total_lines,
            output_bytes=len(body),
            output_lines=output_lines,
            elided_bytes=max(0, elided_bytes),
            elided_lines=elided_lines,
            column_dropped_bytes=self._column_dropped_bytes,
            column_truncated_lines=self._column_truncated_lines,
            head_lines=head_lines,
            max_columns=self._max_columns,
        )

    def _consume(self, data: bytes, *, final: bool) -> None:
        data = self._sanitise(data, final=final)
        if not data:
            return
        self._saw_text = True
        # `count` walks the bytes one at a time (≈ 1 GB/s here) where `in` is a memchr (≈ 40
        # times faster): a chunk of one long line (minified JSON, base64, a progress bar's
        # carriage returns) skips the walk. On base64 output the count was over half of the
        # window's cost per chunk (bench/PROFILE.md, "The pipe stream's window").
        if b"\n" in data:
            self._newlines += data.count(b"\n")
        if self._max_columns:
            data = self._cap_columns(data)
        if data:
            self._append_to_windows(data)

    def _sanitise(self, data: bytes, *, final: bool) -> bytes:
        if self._carry:
            data, self._carry = self._carry + data, b""
        if b"\x1b" in data:
            start = _partial_escape_start(data)
            if start is not None:
                if not final:
                    self._carry = _shorten_escape(data[start:])
                # Keep the partial's ESC (removed below as a lone ESC): a string open before
                # it ends there whatever the partial becomes, as it does in one read.
                data = data[: start + 1]
            data = _ESCAPE_RE.sub(b"", data)
        if any(control in data for control in _C0_CONTROL_BYTES):
            data = data.translate(None, _C0_CONTROLS)
        if b"\xc2" in data:
            data = _C1_CONTROL_RE.sub(b"", data)
        if b"\r" in data:
            if not final and data.endswith(b"\r"):
                data = data.rstrip(b"\r")
                self._carry = b"\r" + self._carry
            data = data.replace(b"\r\n", b"\n")  # the common case, ten times faster than _CR_RE
            if b"\r" in data:
                data = _CR_RE.sub(b"\n", data)
        return data

    def _cap_columns(self, data: bytes) -> bytes:
        """Cut lines longer than max_columns to max_columns - 3 bytes + `…`.

        Hops forward by rfind over windows of max_columns bytes, so short lines cost no
        Python-level work each; only lines that hit the cap are handled one by one.
        """
        limit = self._max_columns
        keep = limit - len(_ELLIPSIS)
        if self._held:
            data, self._held = self._held + data, b""
        size = len(data)
        column = self._column
        pieces: list[bytes] = []
        emit_from = 0
        pos = 0
        while pos < size:
            if self._dropping:
                newline = data.find(b"\n", pos)
                if newline < 0:
                    self._column_dropped_bytes += size - pos
                    emit_from = pos = size
                    break
                self._column_dropped_bytes += newline - pos
                self._dropping = False
                emit_from, pos, column = newline, newline + 1, 0
                continue
            overflow_at = pos + limit - column  # the byte that would make the line too long
            if overflow_at >= size:
                break
            newline = data.rfind(b"\n", pos, overflow_at + 1)
            if newline >= 0:
                pos, column = newline + 1, 0
                continue
            cut = floor_boundary(data, pos + keep - column)
            pieces += (data[emit_from:cut], _ELLIPSIS)
            self._column_truncated_lines += 1
            self._dropping = True
            pos = cut
        end = size
        if not self._dropping:
            newline = data.rfind(b"\n", pos)
            line_start, column = (newline + 1, 0) if newline >= 0 else (pos, column)
            length = column + size - line_start
            if length > keep:
                # Those bytes survive only if the line ends within the cap: hold them back.
                end = floor_boundary(data, line_start + keep - column)
                self._held = data[end:]
                length = column + end - line_start
            self._column = length
        if not pieces and emit_from == 0 and end == size:
            return data
        pieces.append(data[emit_from:end])
        return b"".join(pieces)

    def _append_to_windows(self, data: bytes) -> None:
        self._kept_bytes += len(data)
        if self._head_open:
            room = self._head_limit - len(self._head)
            if len(data) <= room:
                self._head += data
                return
            cut = floor_boundary(data, room)
            self._head += data[:cut]
            data = data[cut:]
            # Closed for good even if a few bytes of room are left: later bytes must not
            # land in the head ahead of ones already in the tail.
            self._head_open = False
        tail = self._tail
        if len(data) >= self._tail_limit:
            tail[:] = data[-self._tail_limit :]
            return
        tail += data
        if len(tail) > 2 * self._tail_limit:
            del tail[: len(tail) - self._tail_limit]
