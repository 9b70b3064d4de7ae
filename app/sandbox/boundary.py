"""The sandbox the server holds: on or off, checked at start, and which profile each spawn
gets (docs/sandbox.md)."""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

from app.core.config import Settings
from app.process.short_run import run_briefly
from app.sandbox.bwrap import (
    NO_BINDS,
    Identity,
    SpawnBinds,
    bwrap_prefix,
    cover_key,
    inner_reset,
    resolved_now,
    sandbox_argv,
    shell_launch,
    with_seccomp,
)
from app.sandbox.defaults import default_profile
from app.sandbox.egress import EgressProxy
from app.sandbox.host_list import hosts_of
from app.sandbox.landlock import landlock_abi
from app.sandbox.profile import SandboxProfile
from app.sandbox.program import launch_directory
from app.sandbox.seccomp import host_program, program_pipe

# What `GET /v1/info` names as the parts the boundary is built from.
MECHANISMS = (
    "bubblewrap",
    "user-namespace",
    "pid-namespace",
    "mount-namespace",
    "ipc-namespace",
    "network-namespace",
    "capabilities-dropped",
    "host-list-proxy",
)
OFF_HINT = "set SHELLGATE_SANDBOX=off to run commands unsandboxed (docs/sandbox.md)"


# The probes that built their sandbox in this process: `shellgate serve` checks before it builds
# the app, the lifespan checks again (an embedded app has only that one), and the second would
# start bwrap again for the same answer (≈ 40 ms of the start's wall time).
_BUILT: set[tuple[str, ...]] = set()


class SandboxUnavailable(Exception):
    """The kernel or the host cannot build the sandbox: the server must not start."""


class Sandbox:
    def __init__(self, settings: Settings) -> None:
        self.enforced = settings.sandbox == "on"
        self.default = default_profile(settings)
        self._bwrap = settings.sandbox_bwrap
        # The proxy of the commands whose network is a host list (listens only for them).
        self.egress = EgressProxy()
        # The last standby argv built and the key it was built under (`standby_sandbox`):
        # `bwrap_prefix` is a function of that key (where each path leads, whether it is a
        # directory), and builds in ≈ 300 µs what a lookup gives in 70 (the key's cost), for
        # every foreground call's standby. One tuple, swapped whole: the spawn-ahead thread
        # and the loop may both read it.
        self._standby_built: tuple[Hashable, list[str]] | None = None

    def check(self) -> None:
        """Blocking: build the default sandbox once around `true`; `SandboxUnavailable` with
        the reason when it cannot be built (and the sandbox is on)."""
        if not self.enforced:
            return
        if not os.access(self._bwrap, os.X_OK):
            raise SandboxUnavailable(
                f"the sandbox needs bubblewrap ({self._bwrap}), which is not installed "
                f"(apt-get install bubblewrap); or {OFF_HINT}"
            )
        argv = sandbox_argv(self.default, ["true"], "/", bwrap=self._bwrap)
        if tuple(argv) in _BUILT:
            return
        # With the seccomp filter, as every command gets it: a kernel that cannot install one
        # stops the start here, not each command later.
        seccomp = self.seccomp_pipe()
        try:
            probe = run_briefly(
                sandbox_argv(self.default, ["true"], "/", bwrap=self._bwrap, seccomp_fd=seccomp),
                pass_fds=() if seccomp is None else (seccomp,),
            )
        finally:
            if seccomp is not None:
                os.close(seccomp)
        if probe.exit_code != 0:
            said = probe.output.splitlines()[-1] if probe.output else f"exit {probe.exit_code}"
            raise SandboxUnavailable(
                f"bubblewrap cannot build the sandbox on this host ({said}); "
                f"allow unprivileged user namespaces, or {OFF_HINT}"
            )
        _BUILT.add(tuple(argv))

    def exposed_launch(self) -> str | None:
        """The reason the server must not serve, when it was started as `python -m app` from
        a directory its commands can write (app/sandbox/program.py, `launch_directory`); None
        when the sandbox is off (commands are the server's user then) or nothing is exposed."""
        here = launch_directory()
        if not self.enforced or here is None:
            return None
        trees = [Path(os.path.realpath(tree)) for tree in self.default.write]
        if not any(Path(here).is_relative_to(tree) for tree in trees):
            return None
        return (
            f"started as `python -m app` in {here}, which commands can write (the workspace): "
            "an `app` package a command left there would run as this server, outside the "
            "sandbox, at its next start; start it with `shellgate serve` or "
            "`python -P -m app serve`, or from another directory (docs/sandbox.md)"
        )

    def seccomp_pipe(self) -> int | None:
        """What one spawn's bwrap reads its seccomp filter from (app/sandbox/seccomp.py), the
        caller's to pass on and close; None when the sandbox is off or this host has none."""
        return program_pipe() if self.enforced else None

    def profile_for(
        self, draft_record: dict[str, Any] | None, session_record: dict[str, Any] | None
    ) -> SandboxProfile | None:
        """The profile one spawn runs with: the draft's own (the policy or an approval set
        it), else its session's, else the default; None when the sandbox is off."""
        if not self.enforced:
            return None
        for record in (draft_record, session_record):
            if record is not None:
                return SandboxProfile.from_record(record)
        return self.default

    def session_record(self) -> dict[str, Any] | None:
        """What a new session stores as its profile."""
        return self.default.to_record() if self.enforced else None

    def launch(
        self,
        shell: str,
        profile: SandboxProfile,
        argv: list[str],
        cwd: str,
        binds: SpawnBinds = NO_BINDS,
        witness_fd: int | None = None,
        seccomp_fd: int | None = None,
    ) -> list[str]:
        """What a spawn runs: `shell` confines itself (app/process/confine.sh), ignores bwrap's
        signals and execs the sandbox of `profile` with `binds` around `argv` (a host list's
        egress socket is opened by `egress`); `witness_fd`, `seccomp_fd`: see `shell_launch`."""
        return shell_launch(
            shell,
            profile,
            argv,
            cwd,
            binds=binds,
            bwrap=self._bwrap,
            witness_fd=witness_fd,
            seccomp_fd=seccomp_fd,
        )

    def standby_prefix(self) -> list[str] | None:
        """What a standby shell runs behind so that it waits inside the default sandbox (its
        command then starts with nothing to build); None when the sandbox is off. bwrap's
        own argv: the standby's first stage ignores bwrap's signals itself before it execs it
        (app/process/standby_enter.sh), one exec fewer than `env --ignore-signal`."""
        return self.standby_sandbox()[1]

    def standby_sandbox(self) -> tuple[Hashable, list[str] | None]:
        """`standby_key()` and `standby_prefix()`, built now, for one standby: the key first,
        so that a change between the two makes the standby look older than its sandbox (and
        not be used), never newer."""
        key = self.standby_key()
        if not self.enforced:
            return key, None
        built = self._standby_built
        if built is not None and built[0] == key:
            return key, list(built[1])
        argv = bwrap_prefix(self.default, "/", bwrap=self._bwrap)
        # Kept for reuse only when nothing moved while it was built: a path removed between
        # the key and the build (then made again) would otherwise leave an argv without its
        # cover under a key that says it is there.
        if self.standby_key() == key:
            self._standby_built = (key, argv)
        return key, list(argv)

    def standby_spawn(self) -> tuple[Hashable, list[str] | None, tuple[int, ...]]:
        """`standby_sandbox()` for one standby to spawn now: its argv names the seccomp filter's
        pipe, returned with it for the spawn to pass on (and the caller to close after)."""
        key, argv = self.standby_sandbox()
        if argv is None:
            return key, None, ()
        seccomp = self.seccomp_pipe()
        return key, with_seccomp(argv, seccomp), () if seccomp is None else (seccomp,)

    def standby_key(self) -> Hashable:
        """What the default sandbox's mounts depend on now (`cover_key`): a standby built
        under another key waits in a sandbox a spawn now would not build (a hidden path made
        since its start is not covered in it), so it must not run a command."""
        return cover_key(self.default) if self.enforced else None

    def standby_fit(
        self, profile: SandboxProfile | None, cwd: str, extra: bool
    ) -> Callable[[], Hashable] | None:
        """Whether a standby built by `standby_prefix` may run this spawn (the same profile, no
        path of the server's to bind, and a cwd inside the sandbox's writable tree and under
        no hidden path): None when not, else what `take_standby` compares a standby's key
        with, `standby_key()` as this check worked it out. Where the hidden paths lead is
        looked up once for both: with the default list, of dozens of paths, each pass is
        about 0.05 ms of a spawn."""
        if profile is None:
            return lambda: None
        if extra or profile != self.default or hosts_of(profile) is not None:
            return None  # (a host list's proxy and relay are the execution's own)
        # Where each path leads now, as the kernel resolves it (a path that leads nowhere
        # contains no existing cwd); cheaper than `os.path.realpath`'s walk per path.
        if (here := resolved_now(cwd)) is None:
            return None  # the spawn says why
        real = here[0]

        def within(there: tuple[str, bool] | Identity | None) -> bool:
            return there is not None and (
                real == there[0] or real.startswith(there[0].rstrip("/") + "/")
            )

        key = cover_key(profile)  # = standby_key(): the profile is the default, the sandbox on
        if not any(map(within, key.write)) or any(map(within, key.hidden)):
            return None
        return lambda: key

    @property
    def standbys_serve(self) -> bool:
        """Whether a shell waiting in the default sandbox could run a command: not when the
        default network is a host list, whose proxy and relay each execution opens for
        itself (so spawning ahead would only build sandboxes nobody takes)."""
        return not self.enforced or hosts_of(self.default) is None

    def status(self) -> dict[str, Any]:
        """`GET /v1/info`'s `sandbox`."""
        mechanisms = [*MECHANISMS, *(["seccomp"] if host_program() is not None else [])]
        return {
            "enforced": self.enforced,
            "mechanisms": mechanisms if self.enforced else [],
            "landlock_abi": landlock_abi(),
        }


__all__ = ["Sandbox", "SandboxUnavailable", "inner_reset"]
