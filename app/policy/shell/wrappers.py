"""Commands that run another command (`sudo`, `env`, `timeout`, `xargs`, `find -exec`, `uv
run`, …): how to skip each one's options to reach the command it runs."""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from app.policy.shell.words import HEADER_WORDS, RESERVED_PREFIXES


@dataclass(frozen=True, slots=True)
class Wrapper:
    """How to skip a wrapper's own options to reach the command it runs (from its manual).

    `short_flags`/`long_flags` are the options that take no argument (or only an attached
    one, `--opt=x`, `-mFILE`); an option the model does not know is read both ways, taking the
    next word and not, so a missing entry makes the reader stricter, never blind.
    `positional_first`: the operands come before the options (`setarch ARCH [options] CMD`).
    """

    short_with_arg: str = ""
    long_with_arg: frozenset[str] = frozenset()
    positional: int = 0
    numeric_flags: bool = False
    assignments: bool = False
    short_flags: str = ""
    long_flags: frozenset[str] = frozenset()
    positional_first: bool = False


def _w(
    short_with_arg: str = "",
    long_with_arg: str = "",
    short_flags: str = "",
    long_flags: str = "",
    **kwargs: Any,
) -> Wrapper:
    return Wrapper(
        short_with_arg=short_with_arg,
        long_with_arg=frozenset(long_with_arg.split()),
        short_flags=short_flags,
        long_flags=frozenset(long_flags.split()),
        **kwargs,
    )


WRAPPERS: dict[str, Wrapper] = {
    "env": _w(
        "uCS",
        "--unset --chdir --split-string",
        "i0v",
        "--ignore-environment --null --debug --list-signal-handling --ignore-signal"
        " --default-signal --block-signal",
        assignments=True,
    ),
    "timeout": _w(
        "sk",
        "--signal --kill-after",
        "vfp",
        "--verbose --foreground --preserve-status",
        positional=1,
    ),
    "nohup": _w(),
    "nice": _w("n", "--adjustment", numeric_flags=True),
    "time": _w("fo", "--format --output", "pavq", "--portability --append --verbose --quiet"),
    "xargs": _w(
        "aLnPsdEI",
        "--arg-file --delimiter --max-args --max-procs --max-chars --process-slot-var",
        "0oprtxiel",
        "--null --open-tty --interactive --no-run-if-empty --verbose --exit --show-limits"
        " --eof --replace --max-lines",
    ),
    "sudo": _w(
        "CDghpRrTtUu",
        "--close-from --chdir --group --host --prompt --chroot --role --command-timeout --type"
        " --other-user --user",
        "ABbEeHiKklnPSsVv",
        "--askpass --bell --background --preserve-env --edit --set-home --login"
        " --remove-timestamp --reset-timestamp --list --non-interactive --preserve-groups"
        " --stdin --shell --version --validate",
    ),
    "doas": _w("uC", "", "nsL"),
    "command": _w("", "", "pvV"),
    "builtin": _w(),
    "exec": _w("a", "", "cl"),
    "stdbuf": _w("ioe", "--input --output --error"),
    "setsid": _w("", "", "cfw", "--ctty --fork --wait"),
    "ionice": _w("cnpPu", "--class --classdata --pid --pgid --uid", "t", "--ignore"),
    "busybox": _w(),
    "chrt": _w(
        "TPD",
        "--sched-runtime --sched-period --sched-deadline",
        "abdfiorRpmv",
        "--all-tasks --batch --deadline --fifo --idle --other --rr --reset-on-fork --pid"
        " --max --verbose",
        positional=1,
    ),
    "taskset": _w("", "", "acp", "--all-tasks --cpu-list --pid", positional=1),
    "flock": _w(
        "wEc",
        "--timeout --conflict-exit-code --command",
        "sxeunoF",
        "--shared --exclusive --unlock --nb --nonblock --close --no-fork --verbose",
        positional=1,
    ),
    "unbuffer": _w("", "", "p"),
    "runuser": _w(
        "ugGcsw",
        "--user --group --supp-group --command --session-command --shell --whitelist-environment",
        "lmpPf",
        "--login --preserve-environment --pty --fast",
    ),
    "pkexec": _w("u", "--user", "", "--disable-internal-agent --keep-cwd"),
    "chroot": _w("", "--userspec --groups", "", "--skip-chdir", positional=1),
    # Namespace options take an optional file only when attached (`-mFILE`, `--mount=FILE`).
    "unshare": _w(
        "SGwR",
        "--setuid --setgid --wd --root --map-user --map-users --map-group --map-groups"
        " --propagation --monotonic --boottime --load-interp",
        "muinpUCTfrc",
        "--mount --uts --ipc --net --pid --user --cgroup --time --fork --map-root-user"
        " --map-current-user --map-auto --mount-proc --kill-child --keep-caps --setgroups",
    ),
    "nsenter": _w(
        "tSGW",
        "--target --setuid --setgid --wdns",
        "amuinpUCTrwFZec",
        "--all --mount --uts --ipc --net --pid --user --cgroup --time --root --wd"
        " --preserve-credentials --no-fork --follow-context --user-parent --keep-caps --env"
        " --join-cgroup",
    ),
    "numactl": _w("CNmpP"),
    "faketime": _w("p", "", "f", positional=1),
    "fakeroot": _w("ls", "--lib --faked -i -s", "u", "--unknown-is-real"),
    "strace": _w(
        "abeEIoOpPsSuUX",
        "--columns --detach-on --expr --env --interruptible --output --summary-syscall-overhead"
        " --attach --trace-path --string-limit --summary-sort-by --user --summary-columns"
        " --const-print-style",
        "AcCdDfFhiknqrtTvVwxyYzZ",
        "--follow-forks --output-separately --summary --summary-only --instruction-pointer"
        " --stack-trace --syscall-number --relative-timestamps --absolute-timestamps"
        " --syscall-times --no-abbrev --failed-only --successful-only --daemonize"
        " --seccomp-bpf --summary-wall-clock --debug --help --version",
    ),
    "ltrace": _w("aeEfFlnopsuwxAD"),
    "torsocks": _w(),
    "proxychains": _w("f", "", "q"),
    "proxychains4": _w("f", "", "q"),
    "catchsegv": _w(),
    "dbus-run-session": _w(),
    "xvfb-run": _w("nslpefw"),
    "cpulimit": _w("lpe"),
    "trickle": _w("udwtlnL"),
    "caffeinate": _w("tw"),
    "systemd-run": _w(
        "pEMH",
        "--unit --property --description --slice --uid --gid --setenv --machine --host"
        " --working-directory --nice --on-active --on-calendar --timer-property --path-property"
        " --socket-property --service-type",
        "drtPGSq",
        "--user --system --scope --remain-after-exit --send-sighup --pty --pipe --quiet --wait"
        " --collect --shell --same-dir --no-block --no-ask-password",
    ),
    # GNU parallel: options that take an argument (its manual); `:::` arguments are shell text.
    "parallel": _w(
        "aCdEIjlLnNPSs",
        "--arg-file --arg-file-sep --arg-sep --basefile --bf --block --block-size --colsep"
        " --compress-program --decompress-program --delay --delimiter --env --halt"
        " --header --joblog --jobs --load --max-args --max-chars --max-lines"
        " --max-procs --memfree --nice --results --res --retries --return"
        " --sshlogin --sshloginfile --slf --ssh --tagstring --tmpdir --timeout --workdir --wd"
        " --eof --sqlmaster --sqlworker --termseq --limit --recend --recstart --rpl"
        " --hostgroups --profile",
        "0kqruvxXgtpmi",
        "--null --keep-order --quote --no-run-if-empty --ungroup --verbose --xargs --group"
        " --dry-run --will-cite --pipe --pipepart --line-buffer --tag --bar --eta --progress"
        " --tty --silent --no-notice --shuf --nonall --onall --fifo --cat --tee --plus"
        " --shebang-wrap --replace",
    ),
    "noglob": _w(),
    "screen": _w("SclpThtsXe"),
    "nocorrect": _w(),
    "prlimit": _w("p", "--pid --output"),
    "setpriv": _w(
        "",
        "--reuid --regid --ruid --rgid --euid --egid --groups --inh-caps --ambient-caps"
        " --bounding-set --securebits --pdeathsig --selinux-label --apparmor-profile",
        "dd",
        "--dump --nnp --no-new-privs --keep-groups --clear-groups --init-groups --reset-env",
    ),
    # `setarch ARCH [options] [program]`; the personality flags take no argument.
    "setarch": _w(
        "",
        "",
        "BFILRSTXZ3v",
        "--uname-2.6 --verbose --32bit --fdpic-funcptrs --short-inode --addr-compat-layout"
        " --addr-no-randomize --whole-seconds --sticky-timeouts --read-implies-exec"
        " --mmap-page-zero --3gb --4gb --list",
        positional=1,
        positional_first=True,
    ),
    "linux32": _w("", "", "BFILRSTXZ3v", "--addr-no-randomize --read-implies-exec --3gb"),
    "linux64": _w("", "", "BFILRSTXZ3v", "--addr-no-randomize --read-implies-exec --3gb"),
    "valgrind": _w(),
    "firejail": _w(),
    "cgexec": _w("g", "", "", "--sticky"),
    "rlwrap": _w("bCDefgHlpPqsStwz"),
    "daemonize": _w("ceEoplu"),
    "ssh-agent": _w("aEPt"),
    "dbus-launch": _w(),
    "entr": _w(),
    "tsp": _w("LND"),
    "nq": _w(),
    # Multi-call binaries, loaders and small runners (their manuals).
    "toybox": _w(),
    "ld.so": _w(
        "",
        "--library-path --inhibit-rpath --audit --preload --argv0 --glibc-hwcaps-prefix"
        " --glibc-hwcaps-mask",
        "",
        "--list --verify --inhibit-cache --list-tunables --list-diagnostics --help --version",
    ),
    "sshpass": _w("pfdP", "", "ev"),
    "eatmydata": _w(),
    "chronic": _w("", "", "ev"),
    "ifne": _w("", "", "n"),
    "tini": _w("pe", "", "svwglV"),
    "dumb-init": _w("r", "--rewrite", "cvVh", "--single-child --verbose --version --help"),
    "chpst": _w("uUbe/CnlLmdopfcr", "", "vP012"),
    "setuidgid": _w(positional=1),
    "envuidgid": _w(positional=1),
    "envdir": _w(positional=1),
    "softlimit": _w("madopfcrtsl"),
    "nocache": _w("n", "", "D"),
    "runcon": _w("turl", "--type --user --role --range", "c", "--compute"),
}
# The dynamic loader run as a program (`/lib64/ld-linux-x86-64.so.2 /bin/rm x`), by its names.
_DYNAMIC_LOADER = re.compile(r"ld(?:-linux[\w.-]*|-musl[\w.-]*|64)?\.so(?:\.[0-9]+)*")
# Runners whose first word after the subcommand is the command they run.
_SUBCOMMAND_RUNNERS = {
    "uv": "run",
    "poetry": "run",
    "pipenv": "run",
    "pdm": "run",
    "hatch": "run",
    "bundle": "exec",
    "conda": "run",
    "mamba": "run",
}

XARGS_INPUT = "{}"  # stands for the arguments xargs appends from its stdin
ASSIGNMENT_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")
# What `env` takes as an assignment: any word with a `=` after its first character, whatever
# the name (`env 'BASH_FUNC_f%%=() { …; }' bash -c f` hands bash a function).
ENV_ASSIGNMENT_WORD = re.compile(r"[^=-][^=]*=", re.DOTALL)


def basename(word: str) -> str:
    return word.rsplit("/", 1)[-1] if "/" in word else word


def strip_reserved(words: list[str]) -> list[str]:
    i = 0
    while i < len(words):
        if words[i] == "coproc":
            # `coproc NAME { …; }` / `coproc NAME ( … )`: the name is not a command either.
            named = i + 2 < len(words) and words[i + 2] in ("{", "(")
            i += 2 if named else 1
        elif words[i] in RESERVED_PREFIXES:
            i += 1
        elif words[i] == "function":
            i += 2  # `function name { …`: the name is not a command either
        else:
            break
    if i < len(words) and words[i] in HEADER_WORDS:
        if words[i] in ("for", "select") and words[i + 2 : i + 3] == ["do"]:
            return strip_reserved(words[i + 3 :])  # `for NAME do …` (no `in`): the body
        return []
    return words[i:] if i else words


def _option_widths(word: str, spec: Wrapper) -> frozenset[int]:
    """How many words an option takes with its argument: {1}, {2}, or both when the model of
    the wrapper does not know the option (then both readings are followed)."""
    if word.startswith("--"):
        if "=" in word or word in spec.long_flags:
            return _ONE
        return _TWO if word in spec.long_with_arg else _EITHER
    if spec.numeric_flags and word[1:].isdigit():
        return _ONE
    widths: set[int] = set()
    letters = word[1:]
    for k, letter in enumerate(letters):
        last = k == len(letters) - 1
        if letter in spec.short_with_arg:
            widths.add(2 if last else 1)
            return frozenset(widths)
        if letter not in spec.short_flags:
            widths.update((1, 2) if last else (1,))  # may take the rest (or next word)
    widths.add(1)
    return frozenset(widths)


_ONE = frozenset({1})
_TWO = frozenset({2})
_EITHER = frozenset({1, 2})
# How many readings of a wrapper's options are followed for one command.
_MAX_OPTION_READINGS = 8


def skip_options_all(words: list[str], spec: Wrapper) -> list[list[str]]:
    """Every command a wrapper may run: `words` minus the wrapper, its options and operands,
    under each reading of the options its model does not know (first the model's own)."""
    n = len(words)
    return [words[command:] if command < n else [] for _, command in _readings(words, spec)]


def wrapper_assignments(words: list[str], spec: Wrapper) -> list[str]:
    """The `NAME=value` words a wrapper that takes them (`env`) sets for the command it runs,
    under every reading of its options (an option's value is never one)."""
    found: list[str] = []
    for assignments, command in _readings(words, spec):
        found.extend(word for word in words[assignments:command] if word not in found)
    return found


def _readings(words: list[str], spec: Wrapper) -> list[tuple[int, int]]:
    """For each reading of the wrapper's options: where its assignments start and where the
    command it runs starts (both `len(words)` or more when there is none)."""
    n = len(words)
    starts: list[tuple[int, int]] = []
    pending = [1 + (spec.positional if spec.positional_first else 0)]
    if spec.positional_first:
        # Its options may also come before the operands (`setarch -R x86_64 CMD`).
        first = 1
        while first < n and words[first].startswith("-") and words[first] != "--":
            first += min(_option_widths(words[first], spec))
        if first > 1:
            pending.append(first + spec.positional)
    seen: set[int] = set()
    while pending and len(starts) < _MAX_OPTION_READINGS:
        i = pending.pop()
        if i in seen:
            continue
        seen.add(i)
        while i < n:
            word = words[i]
            if word == "--":
                i += 1
                break
            if word == "-":  # `env -` is `env -i`
                i += 1
            elif word.startswith("-") and len(word) > 1:
                widths = _option_widths(word, spec)
                if len(widths) > 1:
                    pending.append(i + 2)
                i += min(widths)
            else:
                break
        assignments = i
        if spec.assignments:
            while i < n and ENV_ASSIGNMENT_WORD.match(words[i]):
                i += 1
        if not spec.positional_first:
            i += spec.positional
        starts.append((assignments, i))
    return starts


def skip_options(words: list[str], spec: Wrapper) -> list[str]:
    """Return what a wrapper runs under the model's own reading of its options."""
    return skip_options_all(words, spec)[0]


def _find_exec_commands(words: list[str]) -> list[list[str]]:
    """Commands that `find … -exec CMD … ;` runs."""
    found: list[list[str]] = []
    i = 1
    while i < len(words):
        if words[i] in ("-exec", "-execdir", "-ok", "-okdir"):
            j = i + 1
            while j < len(words) and words[j] not in (";", "+"):
                j += 1
            if j > i + 1:
                found.append(words[i + 1 : j])
            i = j
        i += 1
    return found


def unwrapped_variants(words: list[str]) -> list[list[str]]:
    """Variants of one simple command with one layer of wrapping removed."""
    variants: list[list[str]] = []
    head = words[0]
    name = basename(head)
    if name != head:
        variants.append([name, *words[1:]])
    if ASSIGNMENT_WORD.match(head):
        i = 1
        while i < len(words) and ASSIGNMENT_WORD.match(words[i]):
            i += 1
        if i < len(words):
            variants.append(words[i:])
    if name == "runcon" and len(words) > 2 and not words[1].startswith("-"):
        variants.append(words[2:])  # `runcon CONTEXT CMD` (with options there is no CONTEXT)
    if name == "coreutils":
        # `coreutils --coreutils-prog=rm …` runs `rm …`.
        for i, word in enumerate(words[1:], start=1):
            if word.startswith("--coreutils-prog="):
                variants.append([word.split("=", 1)[1], *words[i + 1 :]])
                break
    if name in ("capsh", "gdb"):
        # `capsh … -- ARGS` runs `bash ARGS`; `gdb --args PROG ARGS` runs PROG (`-ex run`).
        marker = ("--",) if name == "capsh" else ("--args", "-args")
        for i, word in enumerate(words[1:], start=1):
            if word in marker:
                variants.append(["bash", *words[i + 1 :]] if name == "capsh" else words[i + 1 :])
                break
    spec = WRAPPERS.get("ld.so" if _DYNAMIC_LOADER.fullmatch(name) else name)
    if spec is not None:
        # A block of words repeated at the front (`nohup nohup …`, `timeout 5 timeout 5 …`) is
        # skipped whole as well, so a tall stack reaches its command in one step.
        for size in (1, 2, 3):
            if words[:size] == words[size : 2 * size] and len(words) > 2 * size:
                rest = size
                while words[rest : rest + size] == words[:size]:
                    rest += size
                variants.append(words[rest:])
                break
        for inner in skip_options_all(words, spec):
            if inner and name == "xargs":
                # Its replace-string stands for a line of its stdin (`xargs -I X bash -c X`).
                replace = _xargs_replace(words[1 : len(words) - len(inner)])
                if replace:
                    inner = [word.replace(replace, XARGS_INPUT) for word in inner]
            if inner:
                variants.append(inner)
                if name == "xargs" and XARGS_INPUT not in inner:
                    variants.append([*inner, XARGS_INPUT])
    subcommand = _SUBCOMMAND_RUNNERS.get(name)
    if subcommand is not None and subcommand in words[1:]:
        inner = skip_options(words[words.index(subcommand, 1) :], Wrapper())
        if inner:
            variants.append(inner)
    if name == "find":
        variants.extend(_find_exec_commands(words))
    if any("IFS" in word for word in words):
        respaced = " ".join(words).replace("${IFS}", " ").replace("$IFS", " ").split()
        if respaced and respaced != words:
            variants.append(respaced)
    return variants


def _xargs_replace(options: list[str]) -> str | None:
    """The replace-string of xargs' options (`-I X`, `-iX`, `--replace`), if any."""
    for option in options:
        # `--replace` (also abbreviated) takes its optional value only after `=`.
        replace, value = long_option(option, "--replace")
        if replace:
            return value or "{}"
        if option == "-i":
            return "{}"
        if option.startswith("-i") and not option.startswith("--"):
            return option[2:]
    return option_value(options, "-I", "-I")


def long_option(arg: str, long: str, exact: Collection[str] = ()) -> tuple[bool, str | None]:
    """Whether `arg` names the long option `long` the way getopt_long reads it, and the value
    attached with `=` (None when there is none, so the value is the next word).

    getopt_long takes any prefix of a long option's name (`--comm` is `--command`). When the
    prefix fits several of the program's long options it refuses the option; here it is taken
    as `long` all the same (failing closed). Only a name that is exactly another of the
    program's options (`exact`: `--checkpoint` beside `--checkpoint-action`) is that option.
    """
    if not long.startswith("--") or not arg.startswith("--"):
        return False, None
    name, equals, value = arg.partition("=")
    if len(name) < 3 or not long.startswith(name) or (name != long and name in exact):
        return False, None
    return True, value if equals else None


def option_value(args: list[str], short: str, long: str) -> str | None:
    """Value of `-S value`, `-Svalue`, `--long value` or `--long=value` (or an abbreviation of
    `--long`, `--lo=value`) among `args`."""
    for i, arg in enumerate(args):
        if arg == short:
            return args[i + 1] if i + 1 < len(args) else None
        matched, value = long_option(arg, long)
        if matched:
            if value is not None:
                return value
            return args[i + 1] if i + 1 < len(args) else None
        if arg.startswith(short) and not arg.startswith("--") and len(arg) > len(short):
            return arg[len(short) :]
    return None


def cluster_value(args: list[str], letter: str, long: str) -> str | None:
    """Value of an option given alone, in a cluster or attached, as getopt reads it (`-c x`,
    `-qc x`, `-cx`, `-qcx`, `--command=x`, `--comm=x`)."""
    for i, arg in enumerate(args):
        matched, value = long_option(arg, long)
        if matched:
            if value is not None:
                return value
            return args[i + 1] if i + 1 < len(args) else None
        if arg.startswith("-") and not arg.startswith("--"):
            # The letter ends the option letters before it; what follows it is its value.
            for j in range(1, len(arg)):
                if arg[j] == letter:
                    if j + 1 < len(arg):
                        return arg[j + 1 :]
                    return args[i + 1] if i + 1 < len(args) else None
                if not arg[j].isalnum():
                    break  # inside another option's value (`-s/bin/csh`)
    return None
