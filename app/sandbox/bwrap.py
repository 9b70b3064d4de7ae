"""A command wrapped in Debian's bubblewrap (`/usr/bin/bwrap`): the argv that builds the
sandbox of one profile around it (docs/sandbox.md).

What the sandbox is made of:

- its own user namespace with every capability dropped (`--cap-drop ALL`), and no further user
  namespace inside (`--disable-userns`);
- its own PID namespace with a fresh `/proc`: `ps -e` and `/proc/*/environ` show the command's
  own tree, never the server or another execution;
- its own IPC namespace, and with network `off` or a host list its own network namespace
  (loopback only; a host list's proxy is bound in: app/sandbox/host_list.py);
- its own mount namespace: the host read-only (`--ro-bind / /`), a minimal `/dev`, a private
  `/tmp` (a tmpfs that ends with the command), the profile's `write` paths bound writable, the
  server's own program read-only again where a writable path holds it (app/sandbox/program.py),
  then each hidden path covered (an empty read-only tmpfs over a directory, `/dev/null` over a
  file), so hidden wins over writable.
- a seccomp filter, read by bwrap from a pipe each spawn passes it (`--seccomp FD`,
  app/sandbox/seccomp.py).

Signals: the server signals the execution's process group (TERM, a grace, KILL), and bwrap
stays in that group (no `--new-session`: the server already gives each execution a session of
its own, so no terminal of the server's is reachable for TIOCSTI). bwrap itself would die of a
TERM at once and take the sandbox with it (`--die-with-parent`), cutting the command's grace
short: so bwrap runs with the catchable terminating signals ignored (`env --ignore-signal`, or,
for a command spawned through the server's shell or waiting in a standby shell, that shell's
`trap ''` before it execs bwrap: one exec fewer per command), and the command starts with every
signal at its default again (`env --default-signal`).

The environment is not in the argv (`/proc/1/cmdline` is readable inside): the command's
environment is bwrap's own, which passes it on unchanged.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from app.process.posix_shell import POSIX_SHELL
from app.process.signal_defaults import WRAPPER_IGNORED
from app.sandbox.host_list import EGRESS_SOCKET, relay_argv
from app.sandbox.profile import SandboxProfile
from app.sandbox.program import ServerFiles, server_files

BWRAP = "/usr/bin/bwrap"
ENV_PROGRAM = "/usr/bin/env"
# What bwrap (and its init) must survive so that the command alone decides what a signal sent
# to the group does; SIGCHLD is not among them (bwrap waits for its child).
_IGNORED_BY_BWRAP = ",".join(WRAPPER_IGNORED)
# The shell's way to the same: dispositions set to ignore survive the exec into bwrap.
_IGNORE = f"trap '' {' '.join(WRAPPER_IGNORED)}"
IGNORE_THEN_EXEC = f'{_IGNORE}; exec "$@"'
# Where a spawn's witness channel (app/process/exit_witness.py) is inside the sandbox: a single
# digit, the most the witness stage's POSIX sh can name (app/process/posix_shell.py).
WITNESS_FD = 3
# The witness stage: the process that becomes the command says `J` on the channel, whose reading
# end gets a pidfd of it from the kernel, then closes it (the command never holds it) and execs
# what follows. A failed word costs only the witness: its error is not the command's output.
WITNESS_STAGE = f'printf J 2>/dev/null >&{WITNESS_FD}; exec {WITNESS_FD}>&- "$@"'
# Always private: a tmpfs of the sandbox's own.
PRIVATE_TMP = "/tmp"
# Mounted afresh inside: nothing of the host's shows through.
_FRESH = ("/proc", "/dev", PRIVATE_TMP)


def _within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _real(path: str) -> str:
    return os.path.realpath(path)


@dataclass(frozen=True)
class SpawnBinds:
    """What one spawn binds into its profile's sandbox beyond the profile.

    `writable`: paths of the server's own that this one command must write even when they are
    hidden from others (a session's state directory, inside the hidden data dir); `readable`:
    files of the server's it may read (the output logs it names as `artifact://ID`);
    `egress_socket`: the server's proxy for a host list, bound in at `EGRESS_SOCKET`, with the
    relay to it started before the command (app/sandbox/host_list.py)."""

    writable: Iterable[str] = ()
    readable: Iterable[str] = ()
    egress_socket: str | None = None


NO_BINDS = SpawnBinds()


def sandbox_prefix(
    profile: SandboxProfile, cwd: str, *, bwrap: str = BWRAP, seccomp_fd: int | None = None
) -> list[str]:
    """The argv up to and including bwrap's `--`: what comes after it runs in the sandbox, in
    `cwd` (which must exist: bwrap fails rather than run elsewhere). `seccomp_fd`: see
    `with_seccomp`."""
    return [
        ENV_PROGRAM,
        f"--ignore-signal={_IGNORED_BY_BWRAP}",
        "--",
        *with_seccomp(bwrap_prefix(profile, cwd, bwrap=bwrap), seccomp_fd),
    ]


def bwrap_prefix(
    profile: SandboxProfile,
    cwd: str,
    *,
    binds: SpawnBinds = NO_BINDS,
    bwrap: str = BWRAP,
    server: ServerFiles | None = None,
) -> list[str]:
    """`sandbox_prefix` without the signals ignored, with `binds`: for a caller that ignores
    them itself before it execs this. `server`: the server's own files (`server_files()`
    unless given)."""
    server = server_files() if server is None else server
    is_directory = _hidden_now(profile.hidden, server.read_at_start)
    hidden = sorted(is_directory, key=len)
    write = sorted(
        {
            real
            for real in map(_real, profile.write)
            if os.path.isdir(real) and not any(_within(real, h) for h in hidden)
        },
        key=len,
    )
    argv = [
        bwrap,
        "--unshare-user",
        "--disable-userns",
        "--unshare-pid",
        "--unshare-ipc",
        "--die-with-parent",
        "--cap-drop",
        "ALL",
    ]
    if profile.network != "on":
        # A host list too: nothing is routed, its one way out is the proxy's socket bound in
        # below (`binds.egress_socket`, app/sandbox/host_list.py).
        argv.append("--unshare-net")
    argv += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", PRIVATE_TMP]
    for path in write:
        argv += ["--bind", path, path]

    def writable(path: str) -> bool:
        return any(_within(path, tree) for tree in write)

    program = [
        path
        for path in server.program
        if writable(path) and not any(_within(path, h) for h in hidden)
    ]
    # One inside another is read-only with it (and nothing in a read-only tree can be moved).
    program = [path for path in program if not any(path != o and _within(path, o) for o in program)]
    bound = [*write]

    def visible(path: str) -> bool:
        """Whether `path` shows inside at all (a path below a fresh mount does not, unless
        a bind brought it back)."""
        if any(_within(path, fresh) for fresh in _FRESH):
            return any(_within(path, bind) for bind in bound)
        return True

    covered: list[str] = []
    covers: list[list[str]] = []
    for path in hidden:
        if any(_within(path, done) for done in covered) or not visible(path):
            continue
        if is_directory[path]:
            covers.append(["--tmpfs", path])
        elif os.path.lexists(path) or writable(path):
            # Absent, a file the server reads at its start is covered too (`_hidden_now` kept
            # it): bwrap makes it.
            covers.append(["--ro-bind", "/dev/null", path])
        else:
            continue
        covered.append(path)
    for ancestor in _pins([*program, *covered], write, program):
        argv += ["--bind", ancestor, ancestor]
    for path in program:
        argv += ["--ro-bind", path, path]
    real_cwd = _real(cwd)
    if not visible(real_cwd) and not any(_within(real_cwd, h) for h in hidden):
        # Under a mount of the sandbox's own (its private /tmp, its /dev): the host's directory
        # is not in sight there, and bound in it would show what that mount hides (in the
        # host's /tmp, other programs' sockets: a tmux server's takes keystrokes). The command
        # starts in an empty directory of that name instead; under /proc none can be made, and
        # bwrap refuses to start.
        argv += ["--dir", real_cwd]
    for cover in covers:
        argv += cover
    for path in sorted({_real(extra) for extra in binds.writable}, key=len):
        if os.path.isdir(path):
            argv += ["--bind", path, path]
    for path in sorted({_real(extra) for extra in binds.readable}):
        if os.path.exists(path):
            argv += ["--ro-bind", path, path]
    if binds.egress_socket is not None:
        argv += ["--bind", binds.egress_socket, EGRESS_SOCKET]
    for path in covered:
        if is_directory[path]:
            # After the extra binds made their mount points in it: the cover is read-only.
            argv += ["--remount-ro", path]
    argv += ["--chdir", cwd, "--"]
    return argv


def _hidden_now(paths: Iterable[str], read_at_start: Iterable[str]) -> dict[str, bool]:
    """Where each hidden path leads now, as the kernel resolves it, and whether that is a
    directory. A path that leads nowhere has nothing to cover and is left out, unless it is a
    file the server reads at its start (`read_at_start`), which a writable tree must not let a
    command make. One `open(O_PATH)` and `readlink` a path: `os.path.realpath`'s walk of each
    made the default list, of mostly absent paths, cost 0.35 ms of each spawn's 0.7 ms argv."""
    starts = set(read_at_start)
    names = {os.path.basename(start) for start in starts}
    found: dict[str, bool] = {}
    for path in paths:
        if (here := resolved_now(path)) is not None:
            found[here[0]] = found.get(here[0], False) or here[1]
        # Resolving keeps the last name unless that is a (dangling) link: only such a path can
        # lead to one the server reads at its start.
        elif (os.path.basename(path) in names or os.path.islink(path)) and (
            real := _real(path)
        ) in starts:
            found.setdefault(real, False)
    return found


def _pins(protected: Iterable[str], write: list[str], read_only: list[str]) -> list[str]:
    """The directories between a writable tree's root and each protected path in it (a cover,
    the server's program), outermost first, each to be bound onto itself. A mount point cannot
    be renamed or removed, but a directory that only holds one can: a command could otherwise
    move a protected path's parent aside and make a directory of its own in its place, where
    the server, which finds its files by path on the host, would take it for its own (and the
    real one, moved, would no longer be covered). The roots are mount points already, and
    nothing inside a `read_only` tree can be moved."""
    found: set[str] = set()
    for path in protected:
        for tree in write:
            if path == tree or not _within(path, tree):
                continue
            ancestor = os.path.dirname(path)
            while ancestor != tree and len(ancestor) > len(tree):
                if ancestor not in write and not any(_within(ancestor, o) for o in read_only):
                    found.add(ancestor)
                ancestor = os.path.dirname(ancestor)
    return sorted((path for path in found if os.path.isdir(path)), key=len)


def resolved_now(path: str) -> tuple[str, bool] | None:
    """Where `path` leads now, as the kernel resolves it (every symlink followed), and whether
    that is a directory; None when it leads nowhere (absent, dangling, not searchable)."""
    found = _identity_now(path)
    return None if found is None else found[:2]


Identity = tuple[str, bool, int, int]  # where a path leads, a directory?, device, inode


class CoverKey(NamedTuple):
    network: object
    write: tuple[tuple[str, bool] | None, ...]
    hidden: tuple[Identity | None, ...]  # None: the path leads nowhere now


def cover_key(profile: SandboxProfile) -> CoverKey:
    """What `bwrap_prefix` of `profile` depends on in the filesystem: where each writable and
    hidden path leads now and whether it is a directory, and which file each hidden path is.
    Two equal keys mean the same mounts; a hidden path made (or a symlink turned elsewhere)
    since changes it, and so does a hidden file replaced by a rename (an editor's save, `docker
    login`, git's credential store): the kernel detaches a mount whose path another namespace
    replaces, so a sandbox built before would show the new file uncovered. One `open(O_PATH)`,
    `readlink` and `fstat` a path: cheaper than `os.path.realpath`'s walk."""
    return CoverKey(
        profile.network,
        tuple(resolved_now(path) for path in profile.write),
        tuple(_identity_now(path) for path in profile.hidden),
    )


def _identity_now(path: str) -> Identity | None:
    """`resolved_now`, with the device and inode of what `path` leads to."""
    # Most hidden paths lead nowhere on a given host: `access` says so in a third of the time
    # a failed open takes to raise (0.3 against 0.9 µs), and a spawn asks for dozens of them.
    if not os.access(path, os.F_OK):
        return None
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        return (
            os.readlink(f"/proc/self/fd/{fd}"),
            stat.S_ISDIR(info.st_mode),
            info.st_dev,
            info.st_ino,
        )
    except OSError:
        return None
    finally:
        os.close(fd)


def inner_reset() -> list[str]:
    """What the command runs behind inside the sandbox: every signal at its default."""
    return [ENV_PROGRAM, "--default-signal", "--"]


def with_seccomp(prefix: list[str], seccomp_fd: int | None) -> list[str]:
    """`prefix` (bwrap's argv, bwrap first) with bwrap told to install the seccomp filter it
    reads from `seccomp_fd` (app/sandbox/seccomp.py) before it execs the command; `prefix`
    itself when there is none."""
    if seccomp_fd is None:
        return prefix
    return [prefix[0], "--seccomp", str(seccomp_fd), *prefix[1:]]


def sandbox_argv(
    profile: SandboxProfile,
    argv: list[str],
    cwd: str,
    *,
    bwrap: str = BWRAP,
    seccomp_fd: int | None = None,
) -> list[str]:
    """`argv` run in the sandbox of `profile`, in `cwd`."""
    prefix = sandbox_prefix(profile, cwd, bwrap=bwrap, seccomp_fd=seccomp_fd)
    return [*prefix, *inner_reset(), *argv]


def shell_launch(
    shell: str,
    profile: SandboxProfile,
    argv: list[str],
    cwd: str,
    *,
    binds: SpawnBinds = NO_BINDS,
    bwrap: str = BWRAP,
    witness_fd: int | None = None,
    seccomp_fd: int | None = None,
) -> list[str]:
    """`argv` run in the sandbox of `profile` with `binds`, through `shell` (which confines
    itself first: app/process/confine.sh), the shell ignoring bwrap's signals before it execs
    it. With an egress socket, the relay to it (app/sandbox/egress_relay.py) runs before the
    signals are reset: it keeps bwrap's ignored, and it ends with the sandbox.

    `witness_fd`: the writing end of a witness channel (app/process/exit_witness.py), which the
    spawn passes on: the witness stage says `J` on it from the process that becomes the command,
    so that the server can read how the command itself ended where bwrap passes on only an exit
    status. None, or no POSIX shell on the host: no stage, no witness. `seccomp_fd`: see
    `with_seccomp`."""
    relay = relay_argv() if binds.egress_socket is not None else []
    enter, witness = IGNORE_THEN_EXEC, []
    if witness_fd is not None and POSIX_SHELL is not None:
        if witness_fd != WITNESS_FD:
            # Moved to WITNESS_FD for bwrap and everything after it (bwrap leaves the
            # descriptors it is given open in the sandbox), not left open at both numbers;
            # should it be missing, the command runs all the same, without a witness.
            moved = f"{{ exec {WITNESS_FD}>&{witness_fd} {witness_fd}>&-; }} 2>/dev/null"
            enter = f'{_IGNORE}; {moved}; exec "$@"'
        witness = [POSIX_SHELL, "-c", WITNESS_STAGE, "shellgate-witness"]
    return [
        *(shell, "-c", enter, "shellgate-sandbox"),
        *with_seccomp(bwrap_prefix(profile, cwd, binds=binds, bwrap=bwrap), seccomp_fd),
        *relay,
        *witness,
        *inner_reset(),
        *argv,
    ]
