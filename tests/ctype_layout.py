"""Where a C `isdigit(c)` with c > 255 reads, in a given process.

glibc's `isdigit(c)` is `table[c] & _ISdigit` with a table of 384 shorts; for a larger c it
reads `2 * c` bytes past the table and the process dies with SIGSEGV when that address is not
mapped. Whether it is depends on the memory layout of that very run, so tests that must crash
an unguarded parser pick the code points from the process's own memory map.
"""

from __future__ import annotations

import bisect
import ctypes
from dataclasses import dataclass
from pathlib import Path

_UNICODE_END = 0x110000


@dataclass(frozen=True)
class _Mapping:
    start: int
    end: int
    readable: bool
    file_offset: int
    path: str


def _mappings(pid: int | str) -> list[_Mapping]:
    found = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        start, end = (int(part, 16) for part in fields[0].split("-"))
        path = fields[5] if len(fields) > 5 else ""
        found.append(_Mapping(start, end, fields[1][0] == "r", int(fields[2], 16), path))
    return found


def _ctype_table_address() -> int | None:
    locate = ctypes.CDLL(None).__ctype_b_loc  # glibc: where this thread's table pointer lives
    locate.restype = ctypes.POINTER(ctypes.c_void_p)
    address: int | None = locate()[0]
    return address


@dataclass(frozen=True)
class CtypeTable:
    """The ctype table of this process as a place in a file, to find it in another process
    that maps the same file (the same locale)."""

    path: str
    file_offset: int

    @classmethod
    def of_this_process(cls) -> CtypeTable | None:
        address = _ctype_table_address()
        if address is None:
            return None
        for mapping in _mappings("self"):
            if mapping.start <= address < mapping.end and mapping.path.startswith("/"):
                return cls(mapping.path, mapping.file_offset + address - mapping.start)
        return None

    def address_in(self, pid: int | str) -> int | None:
        for mapping in _mappings(pid):
            size = mapping.end - mapping.start
            if mapping.path == self.path and 0 <= self.file_offset - mapping.file_offset < size:
                return mapping.start + self.file_offset - mapping.file_offset
        return None

    def unmapped_lookups(self, pid: int | str) -> list[int]:
        """Code points whose `isdigit()` reads an unmapped (or unreadable) address in `pid`."""
        table = self.address_in(pid)
        if table is None:
            return []
        readable = [(m.start, m.end) for m in _mappings(pid) if m.readable]
        starts = [start for start, _end in readable]
        unmapped = []
        for code_point in range(256, _UNICODE_END):
            address = table + 2 * code_point
            index = bisect.bisect_right(starts, address) - 1
            outside = index < 0 or not address + 2 <= readable[index][1]
            if outside and not 0xD800 <= code_point <= 0xDFFF:
                unmapped.append(code_point)
        return unmapped
