"""The programs both sides of a comparison run, in one place so that they cannot drift."""

from __future__ import annotations

# Raw mode, no terminal echo: each typed byte comes back only once `cat` has read and written it.
ECHO_PROGRAM = "stty raw -echo; echo READY; exec cat"


def stream_program(size: int) -> str:
    """`size` bytes of 'a' in 100-byte lines (plus the newlines fold adds)."""
    return f"head -c {size} /dev/zero | tr '\\0' 'a' | fold -w 100"


def pipe_program(size: int) -> str:
    """`size` zero bytes as one line of base64 (4/3 of `size`): a producer faster than the
    reader, so a pipe stream measures the reader (`fold` capped the old producer at ~200 MB/s)."""
    return f"head -c {size} /dev/zero | base64 -w 0"


def random_bytes_program(writes: int, size: int = 65536, pause_s: float = 0.05) -> str:
    """`writes` writes of `size` random bytes, `pause_s` apart: binary output at a set pace, so
    that the viewers' work, not the producer's speed, decides what the server does."""
    return f"for i in $(seq {writes}); do head -c {size} /dev/urandom; sleep {pause_s}; done"
