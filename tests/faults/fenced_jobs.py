"""Jobs whose processes try every way out of their process group (`setsid`, `setsid -f`, a
double fork, `nohup`), and how a test finds those processes on the host: each is a `sleep`
whose argument (a duration with a random fraction) no other process on the machine has, so
the test looks only at processes it started itself."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path

import httpx


def _cmdline(pid: int) -> list[bytes] | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
    except OSError:
        return None


def _start_ticks_and_state(pid: int) -> tuple[int, str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = stat.rpartition(b") ")[2].split()
    return int(fields[19]), fields[0].decode()  # starttime (field 22), state (field 3)


@dataclass
class FencedJobs:
    """The sleeps of one test: `expected` arguments, found as host pids (with their start
    time, so that a reused pid is never mistaken for one of them)."""

    tag: str = field(default_factory=lambda: str(secrets.randbelow(10**9)).rjust(9, "0"))
    expected: list[str] = field(default_factory=list)
    found: dict[str, tuple[int, int]] = field(default_factory=dict)

    def sleep(self) -> str:
        """`sleep <unique argument>`: 300-odd seconds, longer than any test."""
        argument = f"{300 + len(self.expected)}.{self.tag}"
        self.expected.append(argument)
        return f"sleep {argument}"

    def commands(self) -> list[str]:
        """One job per way out of the group; each also keeps a sleep of its own in it."""
        return [
            self.sleep(),
            f"setsid {self.sleep()} & {self.sleep()}",
            f"setsid -f {self.sleep()}; {self.sleep()}",
            f"( ({self.sleep()} &) & ); {self.sleep()}",
            f"nohup {self.sleep()} >/dev/null 2>&1 & {self.sleep()}",
        ]

    def start(
        self, client: httpx.Client, commands: list[str] | None = None, **request: object
    ) -> list[str]:
        """Each command as a job (`request`: more fields of the call, `pty`, `session`)."""
        ids = []
        for command in commands if commands is not None else self.commands():
            started = client.post(
                "/v1/executions", json={"command": command, "async": True, **request}
            )
            assert started.status_code == 202, started.text
            ids.append(started.json()["id"])
        return ids

    def scan(self) -> dict[str, int]:
        """argument -> pid of every live (not zombie) sleep of this test."""
        wanted = {argument.encode(): argument for argument in self.expected}
        live: dict[str, int] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            argv = _cmdline(pid)
            if argv is None or len(argv) != 2 or not argv[0].endswith(b"sleep"):
                continue
            argument = wanted.get(argv[1])
            stat = _start_ticks_and_state(pid)
            if argument is not None and stat is not None and stat[1] != "Z":
                live[argument] = pid
        return live

    def all_running(self) -> bool:
        live = self.scan()
        for argument, pid in live.items():
            stat = _start_ticks_and_state(pid)
            if stat is not None:
                self.found.setdefault(argument, (pid, stat[0]))
        return set(self.found) == set(self.expected)

    def survivors(self) -> list[int]:
        """The pids found earlier that still run (same start time, not a zombie)."""
        alive = []
        for pid, ticks in self.found.values():
            stat = _start_ticks_and_state(pid)
            if stat is not None and stat[0] == ticks and stat[1] != "Z":
                alive.append(pid)
        return alive

    def running_count(self) -> int:
        return len(self.scan())


def states(client: httpx.Client, ids: list[str]) -> list[str]:
    """Each record's state (or the status of an answer that has none: a 503 while its owner
    may still come back)."""
    found = []
    for execution_id in ids:
        answer = client.get(f"/v1/executions/{execution_id}")
        found.append(
            answer.json()["state"] if answer.status_code == 200 else str(answer.status_code)
        )
    return found


def fence_watcher_of(server_pid: int) -> int | None:
    """The pid of the fence watcher (app/process/fence_watch.py) a test's own server started,
    if it started one: its child running that module."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        parent = int(stat.rpartition(b") ")[2].split()[1])
        if parent == server_pid and b"app.process.fence_watch" in argv:
            return int(entry.name)
    return None
