"""A helper child of the server's own, spoken to one line at a time (`app/policy/reader_process.py`
reads long commands in one). Its calls block: callers run them on a worker thread."""

from __future__ import annotations

import subprocess
import threading

from app.process.helper_children import spawn_helper, watch_helper


class LineChild:
    """`python -m <module>`, which answers each line on its stdin with one line on stdout."""

    def __init__(self, module: str) -> None:
        self.module = module
        # stderr: a native library's last words when it aborts.
        self.process = spawn_helper(module, stderr=subprocess.DEVNULL)

    def ask(self, line: bytes) -> bytes:
        """Its answer to `line` (without the newline); ConnectionError when it died first."""
        assert self.process.stdin is not None and self.process.stdout is not None
        answered = threading.Event()
        # A stopped child would hold its caller (and a reader's slot) until its deadline.
        watch_helper(self.process, answered)
        try:
            self.process.stdin.write(line + b"\n")
            self.process.stdin.flush()
            answer = self.process.stdout.readline()
        finally:
            answered.set()
        if not answer:
            raise ConnectionError(f"{self.module} exited with {self.process.wait()}")
        return answer

    def kill(self) -> None:
        """SIGKILL, by its pid (a no-op once it was reaped): a read waiting on it ends."""
        self.process.kill()

    def close(self) -> None:
        self.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()
