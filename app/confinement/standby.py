"""Spawn ahead: a few standby shells (app/process/standby.py) kept ready, each in a cgroup unit of
its own, with the server's limits, so that the next execution with those limits starts without
moving into its cgroups (or building its sandbox) on the request's path. A thread of its own
makes the next standbys once an execution's unit is released and its answer is out (see
`unit_closed`, `Confinement.standby_wanted`); the request never waits for one to be started
(none ready: the usual spawn), only, rarely, for the end of one already being built.

Why more than one: a standby takes longer to make than calls back to back leave between them
(joining the cgroups waits for the kernel, bwrap builds its namespaces: 7-20 ms here), so with
one, a call that follows another at once found none about one time in five and built its
sandbox on its own path (×1.9 the unsandboxed median in that pattern, bench/bench_sandbox.py).
With two, one is ready while the other is being made.

For the cgroup backends, and for the `rlimit` backend when the sandbox is on (it moves nothing
into a cgroup, but a standby waits in a sandbox already built: bwrap costs ~6 ms a spawn
here); only for commands on pipes (a terminal is made by ptyprocess at the spawn).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path

from app.confinement.limits import Limits
from app.confinement.units import Backend, Unit
from app.core.random_ids import random_token
from app.process import StandbyShell, ulimit_steps
from app.process.standby import ENV_PROGRAM

logger = logging.getLogger("shellgate.confinement")

# The standby's unit is named like an execution (so a restarted server's sweep removes it) but
# can never be mistaken for one: ids are `ex_` + 20 characters.
STANDBY_PREFIX = "ex_standby_"
# Where versions before the memory-file spec (app/process/standby.py) left their spec files,
# which hold a command's environment: removed at start.
LEGACY_SPEC_DIRECTORY = "standby"


# Builds, for one standby, the key of the sandbox it waits in, that sandbox's argv prefix and
# the descriptors the argv names (its seccomp filter's pipe), which the spawn passes on and the
# caller then closes (`Sandbox.standby_spawn`): built per standby, as a spawn builds its own, so
# that a hidden path made since the server started is covered.
SandboxBuilder = Callable[[], tuple[Hashable, list[str] | None, tuple[int, ...]]]


@dataclass
class Standby:
    unit: Unit
    shell: StandbyShell
    # What its sandbox's mounts were built from (`Sandbox.standby_key`); None: no sandbox.
    sandbox_key: Hashable = None


class SpawnAhead:
    def __init__(
        self,
        backend: Backend,
        limits: Limits,
        shell: str,
        data_dir: Path,
        nice: int = 0,
        sandbox: SandboxBuilder | None = None,
        count: int = 2,
    ) -> None:
        self._backend = backend
        self._count = count
        self._sandbox = sandbox
        self._nice = nice
        self._limits = limits
        self._shell = shell
        self._legacy_spec_directory = data_dir / LEGACY_SPEC_DIRECTORY
        # Limits bash cannot set, or no `env` to exec the command with an exact environment:
        # the usual spawn, every time.
        self._usable = ulimit_steps(tuple(self._rlimits())) is not None and os.access(
            ENV_PROGRAM, os.X_OK
        )
        self._ready: list[Standby] = []
        # Set when standbys should be made (at the start, then at each unit's release), until
        # `count` are ready; a failed attempt waits for the next release, so a broken setup
        # costs one attempt per execution at most, never a loop, and logs its traceback once.
        self._want = True
        self._failing = False
        self._wanted = threading.Condition()
        self._stopped = False
        self._thread: threading.Thread | None = None

    def _rlimits(self) -> list[tuple[int, int, int]]:
        return self._backend.rlimits(self._limits)

    def start(self) -> None:
        if not self._usable or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._keep_one_ready, name="spawn-ahead")
        self._thread.daemon = True
        self._thread.start()

    def take(
        self,
        execution_id: str,
        limits: Limits,
        sandbox_key: Callable[[], Hashable] | None = None,
    ) -> Standby | None:
        """A ready standby, its unit now `execution_id`'s; None when there is none for
        these limits, or its sandbox was built from another key than `sandbox_key()` gives
        (`Sandbox.standby_key` as the spawn's fit worked it out, `Sandbox.standby_fit`: a
        hidden path made since, a symlink turned elsewhere), which is then discarded (spawn
        the usual way). It is called only when there is a standby to compare it with."""
        with self._wanted:
            if not self._ready or limits != self._limits:
                return None
            # The oldest: the one most surely done joining its cgroups.
            standby = self._ready.pop(0)
        key = sandbox_key() if sandbox_key is not None else None
        if standby.sandbox_key != key or not standby.shell.alive():
            self._discard(standby)
            with self._wanted:  # its replacement, built from the filesystem as it is now
                self._want = True
                self._wanted.notify()
            return None
        standby.unit = self._backend.adopt(standby.unit, execution_id)
        return standby

    def unit_closed(self) -> None:
        """An execution's unit was released: time for the next standbys, if fewer than
        `count` are ready.
        Not at the take: a standby joining its cgroups holds the kernel's cgroup lock through
        the wait this is all about, and the claiming run's own cgroup work (the rename, the
        release at its end) would wait behind it."""
        with self._wanted:
            self._want = True
            self._wanted.notify()

    def stop(self) -> None:
        with self._wanted:
            self._stopped = True
            ready, self._ready = self._ready, []
            self._wanted.notify()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for standby in ready:
            self._discard(standby)

    def _keep_one_ready(self) -> None:
        # Here, not in `start` (called on the event loop).
        shutil.rmtree(self._legacy_spec_directory, ignore_errors=True)
        while True:
            with self._wanted:
                while not self._stopped and (len(self._ready) >= self._count or not self._want):
                    self._wanted.wait()
                if self._stopped:
                    return
            try:
                standby = self._make()
            except Exception:
                if not self._failing:
                    logger.exception("no standby shell could be made: commands spawn as usual")
                self._failing = True
                with self._wanted:
                    self._want = False
                continue
            if self._failing:
                logger.info("a standby shell could be made again")
            self._failing = False
            with self._wanted:
                kept = not self._stopped
                if kept:
                    self._ready.append(standby)
            if not kept:
                self._discard(standby)

    def _make(self) -> Standby:
        key, prefix, files = self._sandbox() if self._sandbox is not None else (None, None, ())
        try:
            unit = self._backend.open_unit(STANDBY_PREFIX + random_token(12), self._limits)
            try:
                shell = StandbyShell(
                    self._shell, unit.child.cgroup_procs, self._nice, prefix, pass_fds=files
                )
            except BaseException:
                unit.release(kill=True)
                raise
        finally:
            for fd in files:  # the standby's own copies are all it needs
                os.close(fd)
        return Standby(unit, shell, key)

    def _discard(self, standby: Standby) -> None:
        standby.shell.dismiss()
        standby.unit.release(kill=True)
