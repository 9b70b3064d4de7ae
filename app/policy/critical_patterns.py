"""The critical patterns: commands so destructive that a policy escalates them whatever its rules.

Two lists live here. `CRITICAL_PATTERNS` (with the word-level checks of `_segment_hits`) feeds
`find_critical_hits`, which `app.policy.engine.evaluate` uses to raise a verdict to the policy's
`critical` action (docs/policy.md). `RUNNER_CRITICAL_PATTERNS` is the streaming runner's own
list, whose sources runner clients see verbatim. Pure; no I/O.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "CRITICAL_PATTERNS",
    "RUNNER_CRITICAL_PATTERNS",
    "CriticalPattern",
    "find_critical_hits",
    "first_runner_critical_match",
    "judged_by_cwd",
]


@dataclass(frozen=True, slots=True)
class CriticalPattern:
    """A named critical regex. `keywords` are casefolded substrings of which at least one must
    occur in any text the regex can match; they let most texts skip the regex entirely."""

    name: str
    regex: re.Pattern[str]
    keywords: tuple[str, ...]


_I = re.IGNORECASE
# Downloaders, and the shells and interpreters that run what they fetch.
_FETCH = r"\b(?:curl|wget|fetch|xh|https?ie|lwp-request|aria2c)\b"
_FETCH_KEYWORDS = ("curl", "wget", "fetch", "xh", "http", "lwp-", "aria2c")
_INTERPRETER_NAMES = (
    r"(?:(?:ba|da|z|k|mk|c|tc|fi|a|rba|ya|po)?sh|busybox\s+sh|python[0-9.]*|pypy[0-9.]*|"
    r"perl[0-9.]*|ruby[0-9.]*|node(?:js)?|php[0-9.]*|lua(?:jit|[0-9.]*)|Rscript|tclsh|wish|"
    r"pwsh|powershell|osascript|deno|bun|irb|jshell|groovy|source|\.)"
)
_INTERPRETER = r"""["']?(?:[^\s|;&'"]*/)?""" + _INTERPRETER_NAMES + r"""["']?(?=[\s;&|)]|$)"""
# The interpreter runs its stdin: nothing but options follows it, until `-` or `--` (after
# which come the script's own arguments). `python3 -m json.tool` or `perl -ne …` read data.
_READS_STDIN = (
    r"""(?:\s+-[^\s;&|)'"-][^\s;&|)]*)*"""
    r"""(?:\s+(?:--?|/dev/stdin|/dev/fd/0|/proc/self/fd/0)(?=[\s;&|)]|$)[^\n;&|]*)?"""
    r"""\s*(?:$|[;&|)\n`"'])"""
)
# Wrappers that may stand between a pipe and the interpreter (`| sudo -E env bash`).
# An option may take the next word as its value (`sudo -u root`, `env -u X`, `nice -n 5`).
_RUNNER_PREFIX = (
    r"(?:(?:[^\s|;&]*/)?(?:sudo|doas|env|nohup|nice|command|exec|builtin|stdbuf|setsid|"
    r"timeout\s+\S+|time)(?:\s+-[ugCDhprtTUn]\s+[^\s|;&-][^\s|;&]*|\s+-\S+)*"
    r"(?:\s+[A-Za-z_]\w*=\S*)*\s+)*"
)
# A function that pipes into itself in the background, under any name: `f(){ f|f& };f`.
_FORK_BOMB = (
    r"(?:^|[\s;&|({])(?:function\s+)?([^\s(){}|;&<>]{1,64})\s*(?:\(\s*\))?\s*\{[^}]{0,200}?"
    r"(?<![^\s;&|({])\1\s*(?:\|&?|&)\s*\1(?![^\s;&|)}])"
)
# Command position: start of text or right after an operator, optionally behind `sudo`, so
# `echo reboot` and `npm run reboot-tests` are not host control.
_AT_COMMAND = r"(?:^|[;&|(\n`]|\$\()\s*(?:sudo\s+)?"

CRITICAL_PATTERNS: tuple[CriticalPattern, ...] = tuple(
    CriticalPattern(name, re.compile(source, flags), keywords)
    for name, source, flags, keywords in (
        # The recursive/force flag may sit among other options on either side; the lookahead
        # finds it and the possessive run then needs an absolute target, in linear time.
        (
            "rm-recursive-absolute",
            r"\brm(?=(?:\s+-\S+)*?\s+(?:-[a-z]*[rf][a-z]*|--recursive|--force)(?=\s))"
            r"(?:\s+-\S+)*+\s+/",
            _I,
            ("rm",),
        ),
        (
            "rm-no-preserve-root",
            r"\brm\b[^\n;&|]*?--no-preserve-root\b",
            _I,
            ("--no-preserve-root",),
        ),
        ("sudo-rm", r"\bsudo(?:\s+-[A-Za-z-]+(?:[= ][^\s-]\S*)?)*?\s+rm\b", _I, ("sudo",)),
        (
            "chmod-recursive-octal-absolute",
            r"\bchmod\s+(?:-[a-z]*r[a-z]*|--recursive)\s+[0-7]+\s+/",
            _I,
            ("chmod",),
        ),
        (
            "chmod-recursive-symbolic-absolute",
            r"\bchmod\s+(?:-[a-zA-Z]*R[a-zA-Z]*|--recursive)\s+[ugoa+\-=rwxXst,]+\s+/",
            0,
            ("chmod",),
        ),
        (
            "chown-recursive-absolute",
            r"\bchown\s+(?:-[a-z]*r[a-z]*|--recursive)\s+\S+\s+/",
            _I,
            ("chown",),
        ),
        ("fork-bomb", r":\(\)\s*\{\s*:\s*\|\s*:", 0, (":(",)),
        ("fork-bomb-any-name", _FORK_BOMB, 0, ("(", "function")),
        (
            "write-block-device",
            r">[|&]?\s*/dev/(?:sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme\d|mmcblk\d)",
            _I,
            ("/dev/",),
        ),
        (
            "mkfs",
            r"\b(?:mkfs|mke2fs|mkswap|wipefs|mkntfs|mkdosfs|mkexfatfs)(?:\.|\b)",
            _I,
            ("mk", "wipefs"),
        ),
        (
            "dd-to-device",
            r"\bdd\b[^\n;&|]*?\bof=/dev/(?!(?:null|zero|stdout|stderr|tty)\b)",
            _I,
            ("of=/dev/",),
        ),
        ("shred-device", r"\bshred\b[^\n;&|]*?\s/dev/", _I, ("shred",)),
        ("cryptsetup", r"\bcryptsetup\b", _I, ("cryptsetup",)),
        (
            "redirect-to-auth-file",
            r">[|&]?\s*/etc/(?:passwd|shadow|sudoers)\b",
            _I,
            ("/etc/",),
        ),
        ("tee-to-auth-file", r"\btee\s+(?:-\S+\s+)*/etc/(?:passwd|shadow|sudoers)\b", _I, ("tee",)),
        (
            "fetch-piped-to-shell",
            # `2>&1` may sit before the pipe; a subshell or group may hold the interpreter.
            _FETCH
            + r"(?:[^\n;&]|(?<=[<>])&)*?(?<!\|)\|(?!\|)&?\s*(?:[({]\s*)*"
            + _RUNNER_PREFIX
            + _INTERPRETER
            + _READS_STDIN,
            _I,
            _FETCH_KEYWORDS,
        ),
        (
            "fetch-process-substitution",
            r"(?:^|[\s;&|(`])" + _RUNNER_PREFIX + _INTERPRETER + r"[^\n;&|]*?<\(\s*"
            r"(?:sudo\s+)?" + _FETCH,
            _I,
            ("<(",),
        ),
        (
            "fetch-substituted-into-interpreter",
            r"(?:^|[\s;&|(`])" + _RUNNER_PREFIX + r"(?:eval|" + _INTERPRETER_NAMES + r")"
            r"""["']?(?=[\s"'])[^\n;&|]*?(?:\$\(|`)\s*(?:sudo\s+)?""" + _FETCH,
            _I,
            _FETCH_KEYWORDS,
        ),
        (
            "kill-init",
            r"\bkill\s+(?:-9|-KILL|-SIGKILL|-s\s+(?:9|KILL|SIGKILL))\s+-?1\b",
            0,
            ("kill",),
        ),
        (
            "host-power",
            _AT_COMMAND + r"(?:shutdown|poweroff|reboot|halt)(?=\s|$|[;|&)])"
            r"|\bsystemctl\s+(?:reboot|poweroff|halt|kexec)\b",
            _I,
            ("shutdown", "poweroff", "reboot", "halt", "systemctl"),
        ),
        ("init-runlevel", _AT_COMMAND + r"(?:init|telinit)\s+[06]\b", _I, ("init",)),
        (
            "netcat-exec",
            r"\b(?:nc|ncat|netcat)\b[^|;\n]*\s(?:-[a-zA-Z]*[ec](?:[a-zA-Z]*\s|[/'\"])|--(?:sh-|lua-)?exec\b)",
            _I,
            ("nc", "netcat"),
        ),
    )
)


# Patterns that span a pipeline or a substitution, which no one segment holds: they are also
# tried on the text with its quotes and backslashes taken out, as bash removes them from the
# interpreter's name (`curl x | \\sh`, `| 'ba'sh`, `| s""h`).
_ACROSS_COMMANDS = frozenset(
    {"fetch-piped-to-shell", "fetch-process-substitution", "fetch-substituted-into-interpreter"}
)
_QUOTING = re.compile(r"[\\'\"]")
_MAX_BRACE_SPELLINGS = 4


def _dequoted_spellings(command: str) -> list[str]:
    """`command` with its quotes and backslashes taken out, and, when it holds plain brace
    expansions (`| {sh,}`), that text with each one replaced by its first, second, … word."""
    dequoted = _QUOTING.sub("", command)
    spellings = [dequoted]
    if "{" not in dequoted:
        return spellings
    for k in range(_MAX_BRACE_SPELLINGS):

        def pick(braces: re.Match[str], k: int = k) -> str:
            words = braces.group(1).split(",")
            return words[min(k, len(words) - 1)]

        spelling = _PLAIN_BRACES.sub(pick, dequoted)
        if spelling not in spellings:
            spellings.append(spelling)
    return spellings


def find_critical_hits(
    command: str,
    segments: Sequence[str] = (),
    *,
    cwd: str | None = None,
    home: str | None = None,
    cdpath: bool = False,
) -> list[str]:
    """Names of the critical patterns found in the raw command or in any segment.

    `cwd` is the directory the command starts in (None: unknown); a `cd` segment moves it for
    the segments after it, so `cd / && rm -rf .` is a recursive delete of `/`. `home`: what
    `~` and `$HOME` mean to the command when its env sets `HOME` (else the server's);
    `cdpath`: its env sets `CDPATH`, so a `cd` to a plain relative name may lead anywhere.
    """
    if not command.strip():
        return []
    texts = (command, *segments)
    dequoted = _dequoted_spellings(command)
    # Joined, a keyword may straddle two texts; that only costs a needless regex run.
    folded = "\n".join((*texts, *dequoted)).casefold()
    hits = [
        pattern.name
        for pattern in CRITICAL_PATTERNS
        if any(keyword in folded for keyword in pattern.keywords)
        and (
            any(pattern.regex.search(text) for text in texts)
            or (
                pattern.name in _ACROSS_COMMANDS
                and any(pattern.regex.search(text) for text in dequoted)
            )
        )
    ]
    if "fork-bomb-any-name" not in hits and any(_spawns_itself(text) for text in texts):
        hits.append("fork-bomb-any-name")
    found = _segment_hits(segments, cwd, home or _HOME, cdpath)
    hits.extend(name for name in found if name not in hits)
    return hits


# A function definition (`f() {`, `function f {`): its name, and where its body opens.
_FUNCTION_START = re.compile(
    r"(?:^|[\s;&|({])(?:function\s+([^\s(){}|;&<>\\]{1,64})\s*(?:\(\s*\))?"
    r"|([^\s(){}|;&<>\\]{1,64})\s*\(\s*\))\s*\{"
)
# A `&` that puts something in the background (not `&&`, `>&`, `&>`).
_BACKGROUND = re.compile(r"(?<![&>])&(?![&>])")
_FUNCTION_BODY_CHARS = 400
_MAX_FUNCTIONS = 256


def _spawns_itself(text: str) -> bool:
    """A function whose body calls itself twice and puts something in the background, however
    the calls are spelled (`f(){ (f&); f; }`, `f(){ eval f\\|f\\&; }`): a fork bomb by any
    name or form (the pattern `fork-bomb-any-name` only knows `f | f &` and `f & f`)."""
    if "{" not in text or "&" not in text:
        return False
    for count, match in enumerate(_FUNCTION_START.finditer(text)):
        if count == _MAX_FUNCTIONS:
            return True  # more definitions than are worth checking: approve them (fail closed)
        name = match.group(1) or match.group(2)
        body = _function_body(text[match.end() : match.end() + _FUNCTION_BODY_CHARS])
        # A body longer than the window is judged by everything after its start, not cut
        # short: padding must not hide the second call (fail closed).
        if body is None:
            body = text[match.end() :]
        if _BACKGROUND.search(body) and _calls(body, name) >= 2:
            return True
    return False


def _function_body(window: str) -> str | None:
    """The text up to the `}` that closes a body opened just before `window`; None when it
    does not close there."""
    close = window.find("}")
    while close >= 0:
        if window.count("{", 0, close) < window.count("}", 0, close + 1):
            return window[:close]
        close = window.find("}", close + 1)
    return None


def _calls(body: str, name: str) -> int:
    """How many times `name` stands as a word of its own in `body`."""
    count = 0
    at = body.find(name)
    while at >= 0:
        before = body[at - 1 : at]
        after = body[at + len(name) : at + len(name) + 1]
        if not _NAME_CHAR.match(before) and not _NAME_CHAR.match(after):
            count += 1
            if count == 2:
                break
        at = body.find(name, at + len(name))
    return count


_NAME_CHAR = re.compile(r"[\w.-]")


# Where a recursive delete, chmod or chown is catastrophic: the root, the home directory and the
# top-level system directories, however they are spelled.
_HOME = os.path.expanduser("~") if os.path.expanduser("~") != "~" else "/root"
_SYSTEM_DIRS = frozenset(
    [
        "/bin",
        "/boot",
        "/dev",
        "/etc",
        "/home",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/media",
        "/mnt",
        "/opt",
        "/proc",
        "/root",
        "/run",
        "/sbin",
        "/snap",
        "/srv",
        "/sys",
        "/usr",
        "/var",
        "/Users",
        "/System",
        "/Applications",
        "/Library",
    ]
)
_HOME_SPELLINGS = ("~", "$HOME", "${HOME}")
# `${HOME:?}`, `${HOME:-x}`, `${HOME:=x}` (and without the colon) are $HOME itself, set as it is.
# `${HOME%/}`, `${HOME#x}`, `${HOME/a/b}` trim or edit it: read as $HOME (stricter).
_HOME_WITH_DEFAULT = re.compile(r"\$\{HOME(?::?[-=?]|%%?|##?|//?)[^}]*\}")
# `/proc/self/root` (and `/proc/PID/root`) is the root directory seen through procfs.
_PROC_ROOT = re.compile(r"^/proc/(?:self|thread-self|[0-9]+)/root(?=/|$)")
_CWD_SPELLINGS = ("$PWD", "${PWD}")
_TRAILING_GLOBS = ("/*", "/.*", "/{*,.*}", "/{.*,*}", "/**")
_HOST_POWER = frozenset({"shutdown", "reboot", "poweroff", "halt"})
# A directory the text does not name (`cd "$dir"`): it may be `/` or the home directory.
_UNKNOWN = "\0unknown"


def _resolve(path: str, cwd: str | None, home: str = _HOME) -> str | None:
    """The absolute, normalised path a word names, or None when it depends on unknown state."""
    path = _HOME_WITH_DEFAULT.sub(lambda _: "$HOME", path, count=1)
    for spelling in _CWD_SPELLINGS:
        if path == spelling or path.startswith(spelling + "/"):
            path = "." + path[len(spelling) :]
            break
    for spelling in _HOME_SPELLINGS:
        if path == spelling or path.startswith(spelling + "/"):
            path = home + path[len(spelling) :]
            break
    else:
        if path.startswith("~"):  # `~user`: some user's home
            name, _, rest = path[1:].partition("/")
            path = f"/home/{name}/{rest}"
    if len(path) > 1:
        path = path.rstrip("/") or "/"  # `*/` and `./*/` name what `*` and `./*` name
    while path.endswith(_TRAILING_GLOBS):
        path = path[: path.rindex("/")] or "/"
    if path in ("*", ".*", "{*,.*}"):
        path = "."
    if "$" in path or "`" in path:
        return None
    if not path.startswith("/"):
        if cwd is None:
            return None
        path = posixpath.join(cwd, path)
    resolved = "/" + posixpath.normpath(path).lstrip("/")
    while _PROC_ROOT.match(resolved):
        resolved = _PROC_ROOT.sub("", resolved, count=1) or "/"
    return resolved


def _places(target: str, here: str | None, home: str, cdpath: bool) -> set[str | None]:
    """Where `cd target` from `here` may lead. A climb (`..`) may have run more than once (in a
    loop, or repeated: the segments hold each text once), so every directory above it counts
    too; a target the text does not name leads to an unknown directory, and so does a plain
    relative name while `CDPATH` is set (bash looks for it there first)."""
    if cdpath and not target.startswith(("/", "./", "../", "~", "$")) and target not in (".", ".."):
        return {_UNKNOWN, *_places(target, here, home, False)}
    if here == _UNKNOWN:
        there = _resolve(target, None, home)
        return {_UNKNOWN} if there is None else {there}
    there = _resolve(target, here, home)
    if there is None:
        return {None} if here is None and "$" not in target and "`" not in target else {_UNKNOWN}
    places: set[str | None] = {there}
    if not target.startswith("/") and ".." in target.split("/"):
        while there != "/":
            there = posixpath.dirname(there)
            places.add(there)
    return places


def _names_precious(target: str, places: set[str | None], home: str) -> bool:
    """Whether `target`, from any of `places`, is the root, a home or a system directory."""
    for here in places:
        if here == _UNKNOWN:
            if any(_is_precious(_resolve(target, guess, home)) for guess in ("/", home)):
                return True
        elif _is_precious(_resolve(target, here, home)):
            return True
    return False


def _is_precious(path: str | None) -> bool:
    if path is None:
        return False
    return (
        path == "/"
        or path == _HOME
        or path in _SYSTEM_DIRS
        or (posixpath.dirname(path) in ("/home", "/Users") and path.count("/") == 2)
    )


def _operands(words: Sequence[str]) -> list[str]:
    operands: list[str] = []
    options_done = False
    for word in words:
        if word == "--" and not options_done:
            options_done = True
        elif options_done or not word.startswith("-") or word == "-":
            operands.append(word)
    return operands


def _recursive(words: Sequence[str]) -> bool:
    return any(
        word in ("-R", "-r")
        # GNU takes any unambiguous start of a long option: `--rec` is `--recursive`.
        or (len(word) > 2 and "--recursive".startswith(word))
        or (word.startswith("-") and not word.startswith("--") and ("r" in word or "R" in word))
        for word in words
    )


_CWD_COMMANDS = frozenset({"rm", "chmod", "chown", "chgrp", "find", "cd", "pushd", "popd"})


def judged_by_cwd(segments: Sequence[str]) -> bool:
    """Whether the working directory can change what `find_critical_hits` finds here."""
    return any(segment.split(" ", 1)[0].rsplit("/", 1)[-1] in _CWD_COMMANDS for segment in segments)


def _segment_hits(segments: Sequence[str], cwd: str | None, home: str, cdpath: bool) -> list[str]:
    """Checks that need the words of each segment, and the directory it runs in."""
    hits: list[str] = []
    # The command may set CDPATH itself (`export CDPATH=/; cd etc && …`).
    cdpath = cdpath or any("CDPATH=" in segment for segment in segments)
    whereabouts = _Whereabouts(cwd, home, cdpath)
    for segment in segments:
        words = segment.split()
        if not words:
            continue
        name = words[0].rsplit("/", 1)[-1]
        args = words[1:]
        hits.extend(_write_hits(name, words))
        if name in _DIRECTORY_MOVES:
            whereabouts.move(name, args)
            continue
        # A brace expansion in the name (`r{m,} -rf /`, bash runs `rm r -rf /`) leaves the
        # segment unreadable; its plain expansions are judged as names too.
        for candidate in _braced(words[:1]):
            candidate_name = candidate.rsplit("/", 1)[-1]
            if candidate_name and candidate_name not in _DIRECTORY_MOVES:
                hit = _word_hit(candidate_name, args, whereabouts.here, home)
                if hit is not None:
                    hits.append(hit)
    return list(dict.fromkeys(hits))


_DIRECTORY_MOVES = frozenset({"cd", "pushd", "popd"})
# A segment's redirects are words of their own (`echo x >/etc/passwd`); `>&2` is a descriptor.
_WRITE_REDIRECT = re.compile(r"[0-9]*(?:>>?|>\||&>>?|<>)(?!&)(.+)")
_AUTH_FILES = frozenset({"/etc/passwd", "/etc/shadow", "/etc/sudoers"})
_BLOCK_DEVICE = re.compile(r"/dev/(?:sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme\d|mmcblk\d)", _I)
# Names a glob in a write target is tried against (`/etc/pass[w]d`, `/dev/sd?`).
_MAX_GLOB_CHARS = 256
_PRECIOUS_SAMPLES = (*sorted(_AUTH_FILES), "/dev/sda", "/dev/vda", "/dev/nvme0n1", "/dev/mmcblk0")


def _written(target: str) -> str | None:
    """What an absolute write target is to the critical patterns: `auth` (the account files),
    `device` (a disk), or None. The path is normalised as the kernel reads it (`/etc//passwd`,
    `/dev/../dev/sda`); a glob that may name one (`/etc/pass[w]d`) or any file right under
    /etc or /dev counts as one, to be approved (fail closed)."""
    if not target.startswith("/"):
        return None
    path = "/" + posixpath.normpath(target).lstrip("/")
    if any(ch in path for ch in "*?["):
        # fnmatch's translation of a long run of `[` is slow, and no real target is that
        # long: one too long to try may name anything (`/[eee…]tc/passwd`), so it counts.
        if len(path) > _MAX_GLOB_CHARS:
            return "auth"
        for sample in _PRECIOUS_SAMPLES:
            if fnmatch.fnmatchcase(sample, path):
                return "auth" if sample in _AUTH_FILES else "device"
        directory = posixpath.dirname(path)
        return {"/etc": "auth", "/dev": "device"}.get(directory)
    if path in _AUTH_FILES:
        return "auth"
    return "device" if _BLOCK_DEVICE.match(path) else None


def _write_hits(name: str, words: Sequence[str]) -> list[str]:
    """Writes to the account files or a disk through a redirect, `tee` or `dd of=`, however
    the path is spelled."""
    hits: list[str] = []
    for word in words[1:]:
        redirect = _WRITE_REDIRECT.fullmatch(word)
        if redirect is not None:
            kind = _written(redirect.group(1))
            if kind is not None:
                hits.append("redirect-to-auth-file" if kind == "auth" else "write-block-device")
    if name == "tee":
        for target in _operands(words[1:]):
            kind = _written(target)
            if kind is not None:
                hits.append("tee-to-auth-file" if kind == "auth" else "write-block-device")
    elif name == "dd":
        for word in words[1:]:
            kind = _written(word[3:]) if word.startswith("of=") else None
            if kind is not None:
                hits.append("redirect-to-auth-file" if kind == "auth" else "dd-to-device")
    return hits


class _Whereabouts:
    """Where the following segments may run, as `cd`, `pushd` and `popd` move it."""

    def __init__(self, cwd: str | None, home: str, cdpath: bool) -> None:
        self.here: set[str | None] = {cwd}
        self.visited = set(self.here)
        self.home = home
        self.cdpath = cdpath

    def move(self, name: str, args: Sequence[str]) -> None:
        targets = _operands(args)
        if name == "popd":
            self.here = set(self.visited)
        elif not targets and name == "cd":
            self.here = {self.home}
        elif not targets or targets[0] == "-" or targets[0].startswith("+"):
            # `cd -`, `pushd` alone (a swap), `pushd +N`: a directory seen before.
            self.here = set(self.visited)
        else:
            self.here = {
                place
                for now in self.here
                for place in _places(targets[0], now, home=self.home, cdpath=self.cdpath)
            }
        self.visited |= self.here


def _word_hit(name: str, args: Sequence[str], here: set[str | None], home: str) -> str | None:
    """The word-level pattern one segment matches, if any, when it may run in `here`."""
    if name == "rm" and _recursive(args):
        if any(_names_precious(target, here, home) for target in _braced(_operands(args))):
            return "rm-recursive-root-or-home"
    elif name in ("chmod", "chown", "chgrp") and _recursive(args):
        if any(_names_precious(target, here, home) for target in _braced(_operands(args)[1:])):
            return "chmod-chown-recursive-root-or-home"
    elif name == "find" and _find_deletes(args):
        roots = _braced(_find_roots(args)) or ["."]
        if any(_names_precious(root, here, home) for root in roots):
            return "find-delete-root-or-home"
    elif name in _HOST_POWER or (name == "systemctl" and _systemctl_powers(args)):
        return "host-power"
    elif name == "kill" and _kills_init(args):
        return "kill-init"
    elif name in ("init", "telinit") and args[:1] in (["0"], ["6"]):
        return "init-runlevel"
    return None


# A brace expansion with no brace inside its alternatives (`{/*,}`, `{/etc,x}`, `a{b,c}d`).
_PLAIN_BRACES = re.compile(r"\{([^{}]*,[^{}]*)\}")
_MAX_BRACE_WORDS = 64


def _braced(words: Sequence[str]) -> list[str]:
    """`words`, each followed by what its plain brace expansions give, as bash expands them
    (`{/*,}` gives `/*`; an empty word is dropped); a word that would give more than a few
    dozen words keeps the ones found so far."""
    found: list[str] = []
    for word in words:
        pending = [word]
        done: list[str] = []
        while pending and len(done) + len(pending) <= _MAX_BRACE_WORDS:
            current = pending.pop()
            braces = _PLAIN_BRACES.search(current)
            if braces is None:
                done.append(current)
                continue
            head, tail = current[: braces.start()], current[braces.end() :]
            pending.extend(head + part + tail for part in braces.group(1).split(","))
        found.append(word)
        found.extend(w for w in done if w and w != word)
    return found


_SYSTEMCTL_POWER = frozenset({"reboot", "poweroff", "halt", "kexec", "soft-reboot"})
_SYSTEMCTL_STARTS = frozenset(
    {"start", "isolate", "restart", "try-restart", "reload-or-restart", "try-reload-or-restart"}
)
_POWER_TARGET = re.compile(r"(?:reboot|poweroff|halt|kexec|soft-reboot|ctrl-alt-del)\.target")
# Verbs after which a power word is a unit to look at, not an order (`systemctl status reboot`).
_SYSTEMCTL_OTHER = frozenset(
    {"status", "show", "cat", "help", "list-units", "list-unit-files", "list-dependencies"}
    | {"is-active", "is-enabled", "is-failed", "stop", "enable", "disable", "mask", "unmask"}
)


def _systemctl_powers(args: Sequence[str]) -> bool:
    """`systemctl [options] reboot` (`--force`, `-f`, `-i`, `-H host` before it), or a power
    target started (`systemctl start reboot.target`, `isolate poweroff.target`)."""
    operands = [arg for arg in args if not arg.startswith("-")]
    for i, operand in enumerate(operands):
        if operand in _SYSTEMCTL_POWER:
            return True
        if operand in _SYSTEMCTL_STARTS:
            return any(_POWER_TARGET.fullmatch(unit) for unit in operands[i + 1 :])
        if operand in _SYSTEMCTL_OTHER:
            return False
    return False  # (any other operand may be an option's value: `-H host`)


_KILL_SIGNALS = frozenset({"9", "KILL"})
_SIGNAL_OPTIONS = ("-s", "-n", "--signal")


def _kills_init(args: Sequence[str]) -> bool:
    """`kill` sending SIGKILL (`-9`, `-KILL`, `-s KILL`, `-sKILL`, `-n 9`, `--signal=9`) to
    init or to every process (`1`, `01`, `-1`, also after `--`)."""
    signal: str | None = None
    targets: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            targets.extend(args[i + 1 :])
            break
        if signal is None and arg in _SIGNAL_OPTIONS:
            signal = args[i + 1] if i + 1 < len(args) else ""
            i += 2
            continue
        if signal is None and arg.startswith("--signal="):
            signal = arg[len("--signal=") :]
        elif signal is None and arg.startswith(("-s", "-n")) and len(arg) > 2:
            signal = arg[2:]
        elif signal is None and arg.startswith("-") and not arg.startswith("--"):
            signal = arg[1:]
        else:
            targets.append(arg)
        i += 1
    if signal is None or signal.upper().removeprefix("SIG") not in _KILL_SIGNALS:
        return False
    # kill reads a pid as a number, so `+1` is 1 too.
    return any(re.fullmatch(r"[-+]?0*1", target) for target in targets)


def _find_deletes(args: Sequence[str]) -> bool:
    """`find … -delete`, or `-exec`/`-execdir`/`-ok`/`-okdir` running `rm`, `shred` or
    `unlink`."""
    return "-delete" in args or any(
        arg in ("-exec", "-execdir", "-ok", "-okdir")
        and list(args[i + 1 : i + 2]) in (["rm"], ["/bin/rm"], ["shred"], ["unlink"])
        for i, arg in enumerate(args)
    )


def _find_roots(args: Sequence[str]) -> list[str]:
    """The starting points of `find`: its words before the first test or option, after the
    options that may come first (`-H`, `-L`, `-P`, `-O3`, `-D tree`)."""
    roots: list[str] = []
    i = 0
    while i < len(args) and (args[i] in ("-H", "-L", "-P", "-D") or args[i].startswith("-O")):
        i += 2 if args[i] == "-D" else 1
    if i < len(args) and args[i] == "--":  # ends those options: the roots follow
        i += 1
    for arg in args[i:]:
        if arg.startswith(("-", "(", "!")):
            break
        roots.append(arg)
    return roots


# The streaming runner's list (docs/streaming.md#the-ndjson-runner): the exact sources runner
# clients see in `Pattern match found: …`, in evaluation order; every one is valid Python
# `re` as written. Raw string only, as the runner.
_RUNNER_SOURCES: tuple[str, ...] = (
    r"(?i)\brm\s+-[a-z]*[rRfF][a-z]*\s+\/",
    r"(?i)\bsudo\s+rm\b",
    r"(?i)\bchmod\s+-R\s+[0-7]+\s+\/",
    r"\bchmod\s+-R\s+[ugoa+\-=rwxXst,]+\s+\/",
    r"(?i)\bchown\s+-R\s+\S+\s+\/",
    r"(?i):\(\)\s*\{\s*:\s*\|\s*:",
    r"(?i)>\s*\/dev\/sd[a-z]",
    r"(?i)\bmkfs(\.|\b)",
    r"(?i)\bdd\s+if=.+of=\/dev\/",
    r"(?i)\bshred\s+\/dev\/",
    r"(?i)\bcryptsetup\b",
    r"(?i)>\s*\/etc\/(?:passwd|shadow|sudoers)\b",
    r"(?i)\btee\s+(?:-a\s+)?\/etc\/(?:passwd|shadow|sudoers)\b",
    r"(?i)\b(?:curl|wget|fetch)\b[^|]*\|\s*(?:bash|sh|zsh|fish)\b",
    r"(?i)(?:^|[\s;&|(])(?:bash|sh|zsh|source|\.)\s+<\(\s*(?:curl|wget|fetch)\b",
    r"""(?i)\beval\s+["'`]?\$\(\s*(?:curl|wget|fetch)\b|\beval\s+`\s*(?:curl|wget|fetch)\b""",
    r"\bkill\s+-9\s+1\b",
    r"(?i)(?:^|[\s;&|(])(?:shutdown|poweroff|reboot|halt)(?:\s|$|[;|&])",
    r"(?i)(?:^|[\s;&|(])init\s+0\b",
    r"(?i)\bnc\b[^|;]*\s-[a-zA-Z]*[ec][a-zA-Z]*\s",
)
RUNNER_CRITICAL_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (source, re.compile(source)) for source in _RUNNER_SOURCES
)


def first_runner_critical_match(command: str) -> str | None:
    """Source of the first runner pattern found in the raw command (`Pattern match found: …`)."""
    for source, regex in RUNNER_CRITICAL_PATTERNS:
        if regex.search(command):
            return source
    return None
