"""Shell text one command hands to another shell: `bash -c`, `eval`, `su -c`, `trap`, an
alias's value, code-running options and variables (`rsync -e`, `GIT_SSH_COMMAND`), and a
bare shell's stdin (a here-doc, a here-string, a pipe)."""

from __future__ import annotations

import itertools
import re
import shlex
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from app.policy.shell.findings import (
    ALIASES,
    MAX_VARIANT_CHARS,
    MAX_VARIANTS,
    LimitError,
    note_limit,
    note_unreadable,
)
from app.policy.shell.words import SimpleCommand, has_expansion, is_dynamic
from app.policy.shell.wrappers import (
    ASSIGNMENT_WORD,
    WRAPPERS,
    XARGS_INPUT,
    Wrapper,
    basename,
    cluster_value,
    long_option,
    option_value,
    skip_options,
    skip_options_all,
    strip_reserved,
    unwrapped_variants,
    wrapper_assignments,
)

_SHELLS = frozenset(
    {"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "rbash", "csh", "tcsh", "yash"}
    | {"posh", "busybox-sh"}
)

# Paths that name the shell's own stdin or another redirected fd (`bash /dev/stdin`,
# `source /dev/fd/3 3<<<…`): the text fed to it is the script.
_STDIN_PATHS = frozenset({"/dev/stdin", "-"})
_FD_PATH_PREFIXES = ("/dev/fd/", "/proc/self/fd/")


def _names_stdin(path: str | None) -> bool:
    return path is not None and (path in _STDIN_PATHS or path.startswith(_FD_PATH_PREFIXES))


# Variables whose value bash, or a program it starts, later runs as a command.
CODE_VARIABLE_NAMES = (
    "PROMPT_COMMAND",
    "GIT_SSH_COMMAND",
    "GIT_EDITOR",
    "GIT_SEQUENCE_EDITOR",
    "GIT_PAGER",
    "GIT_ASKPASS",
    "GIT_EXTERNAL_DIFF",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "MANPAGER",
    "LESSOPEN",
    "LESSCLOSE",
    "SSH_ASKPASS",
    "SUDO_ASKPASS",
    "BROWSER",
    "PS0",
    "PS1",
    "PS2",
    "PS4",
    "RSYNC_RSH",
    "GIT_CONFIG_PARAMETERS",
    "GIT_PROXY_COMMAND",
    "GIT_SSH",
    "LESSEDIT",
    "SYSTEMD_PAGER",
    "RSYNC_CONNECT_PROG",
    "FCEDIT",
)


# Variables a program reads as options before its own command line (from each program's
# manual): their value is read with that program's options that run shell text
# (`TAR_OPTIONS='--to-command=…' tar x` is `tar --to-command=… x`).
OPTION_VARIABLES: dict[str, str] = {
    "TAR_OPTIONS": "tar",
    "ZIPOPT": "zip",
    "MANOPT": "man",
    "PARALLEL": "parallel",
}


def _is_code_variable(name: str) -> bool:
    """A variable whose value bash or a program it starts runs (`GIT_CONFIG_VALUE_0` too), or
    reads as options that may run a program (`TAR_OPTIONS`), or as a function (`BASH_FUNC_f%%`)."""
    return (
        name in CODE_VARIABLE_NAMES
        or name in OPTION_VARIABLES
        or name.startswith(("GIT_CONFIG_VALUE_", "GIT_CONFIG_KEY_", "BASH_FUNC_"))
    )


def _split_options(value: str) -> list[str]:
    """An options variable's value as its program splits it: shell-like words."""
    try:
        return shlex.split(value)
    except ValueError:  # an unbalanced quote: read it on blanks
        return value.split()


def _function_body(value: str) -> str:
    """`() { …; }`, an exported function's value, as the script of its body."""
    return value.lstrip().removeprefix("()")


def env_scripts(env: Mapping[str, str]) -> list[str]:
    """The values of a request's `env` that a program runs as shell text (`GIT_EXTERNAL_DIFF`,
    `PAGER`, …): the variables this reader reads as code in a command's own assignments, so
    that a request's env is no way around what its text would be judged for."""
    return [
        script
        for name, value in env.items()
        if _is_code_variable(name) and value
        for script in _code_values(name, value, env)
    ]


def _code_values(name: str, value: str, assigned: Mapping[str, str]) -> list[str]:
    """The shell text a code variable's value holds. `GIT_CONFIG_PARAMETERS` is git's list of
    `-c` settings, each `'key=value'` quoted for the shell and separated by spaces: each
    setting's value, as `git -c` gives it (an alias's without its `!`)."""
    program = OPTION_VARIABLES.get(name)
    if program is not None:
        return list(_option_scripts(program, _split_options(value)))
    if name.startswith("GIT_CONFIG_VALUE_"):
        # Its key is `GIT_CONFIG_KEY_<n>`; where that is not known, read it as an alias too.
        key = assigned.get("GIT_CONFIG_KEY_" + name.removeprefix("GIT_CONFIG_VALUE_"))
        if key is not None:
            return _git_setting_scripts(key, value)
        return list(
            dict.fromkeys([value.removeprefix("!"), *_git_setting_scripts("alias.", value)])
        )
    if name.startswith("BASH_FUNC_"):
        return [_function_body(value)]
    if name != "GIT_CONFIG_PARAMETERS":
        return [value]
    try:
        settings = shlex.split(value)
    except ValueError:  # an unbalanced quote: git refuses it too; read it whole
        settings = [value.strip("'")]
    return [
        script
        for setting in settings
        for script in _git_setting_scripts(setting.partition("=")[0], setting.split("=", 1)[-1])
    ]


def _git_setting_scripts(key: str, value: str) -> list[str]:
    """What git runs for a setting whose value is a command: an alias's `!` marks shell text;
    an alias without it is git's own arguments (`alias.x='-c alias.y=!cmd y'`), read as a
    `git` command so that what those arguments run is found too."""
    if key.casefold().startswith("alias.") and not value.startswith("!"):
        return [f"git {value}"]
    return [value.removeprefix("!")]


# Variables naming a script a shell sources before its command (bash, and sh as `ENV`).
_SCRIPT_PATH_VARIABLES = tuple(f"{name}{op}" for name in ("BASH_ENV", "ENV") for op in ("=", "+="))
# `git -c key=value` settings whose value git runs as a command (`!` marks a shell alias).
_GIT_CODE_KEY = re.compile(
    r"(?i)(?:core\.(?:pager|editor|sshcommand|fsmonitor|hookspath|askpass|gitproxy)|"
    r"sequence\.editor|diff\.(?:.*\.)?(?:external|command)|(?:diff|merge)tool\..*\.(?:cmd|path)|"
    r"gpg\.ssh\.defaultkeycommand|interactive\.difffilter|imap\.tunnel|"
    r"core\.alternaterefscommand|submodule\..*\.update|"
    r"sendemail\.(?:.*\.)?(?:sendmailcmd|smtpserver|tocmd|cccmd|headercmd)|"
    r"merge\..*\.driver|gpg\.(?:.*\.)?program|protocol\..*|uploadpack\..*|remote\..*\.(?:uploadpack|receivepack|vcs|proxy)|"
    r"include\.path|includeif\..*|filter\..*|"
    r"credential\..*helper|.*\.(?:textconv|command|cmd|process|clean|smudge)|pager\..*|"
    r"alias\..*)="
)
# Programs that run their stdin as a script later or elsewhere (`echo cmd | at now`).
_STDIN_RUNNERS = frozenset({"at", "batch", "crontab"})


_NAME_SETTERS = frozenset({"read", "mapfile", "readarray", "printf"})
_DECLARERS = frozenset({"declare", "typeset", "local", "export", "readonly"})


def note_run_time_names(name: str, args: list[str]) -> None:
    """Variables that get run-time text where bash later runs it (`printf -v PS4 …`, `read
    PROMPT_COMMAND`), variable names built by expansion (`read "$x"`, `printf -v "$x"`, whose
    subscript bash evaluates), and namerefs to the tables of command names (`declare -n
    h=BASH_CMDS`)."""
    if name in _NAME_SETTERS:
        names = [arg for arg in args if not arg.startswith("-")]
        if name == "printf":
            value = option_value(args, "-v", "-v")
            names = [] if value is None else [value]
        for variable in names:
            base = variable.split("[", 1)[0]
            if _is_code_variable(base):
                note_unreadable(f"{name} sets {base}, which bash runs, to run-time text")
            elif is_dynamic(variable):
                note_unreadable(f"{name} sets a variable whose name is built by expansion")
    elif name in _DECLARERS and any(arg.startswith("-") and "n" in arg for arg in args):
        for arg in args:
            target = arg.split("=", 1)[1] if "=" in arg else ""
            if is_dynamic(arg) or target.startswith(("BASH_CMDS", "BASH_ALIASES")):
                note_unreadable(f"{name} -n makes a reference that cannot be read: {arg}")


def _shell_script(args: list[str]) -> tuple[str | None, str | None]:
    """For `sh`-like argv tails: (the `-c` script if any, the script file operand if any).
    With `-s` the shell reads its script from stdin and every operand is an argument."""
    has_c = has_s = False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            i += 1
            break
        if arg.startswith("--command="):
            return arg[len("--command=") :], None
        if arg == "--command":
            has_c = True
            i += 1
        elif arg.startswith("--"):
            if arg in ("--rcfile", "--init-file") and i + 1 < len(args):
                note_unreadable(f"a shell reads its start-up file from {args[i + 1]}")
            i += 2 if arg in ("--rcfile", "--init-file") else 1
        elif len(arg) > 1 and arg[0] in "-+":
            letters = arg[1:]
            if arg[0] == "-" and "c" in letters:
                has_c = True
            if arg[0] == "-" and "s" in letters:
                has_s = True
            i += 2 if letters[-1] in "oO" else 1
        else:
            break
    operand = args[i] if i < len(args) else None
    if has_c:
        return operand or "", None
    if has_s:
        return None, None
    return None, operand


def _script_option(name: str, args: list[str]) -> str | None:
    """The script a runner hands to a shell through an option (`su -c`, `script -qc`, …)."""
    if name in ("su", "runuser"):
        return cluster_value(args, "c", "--command") or option_value(
            args, "--session-command", "--session-command"
        )
    if name in ("flock", "script"):
        return cluster_value(args, "c", "--command")
    if name == "sg":
        # `sg GROUP [-c] COMMAND`: the command is shell text.
        operands = [arg for arg in args if arg not in ("-", "-c")]
        return operands[1] if len(operands) > 1 else None
    if name == "env":
        return cluster_value(args, "S", "--split-string") or option_value(
            args, "-S", "--split-string"
        )
    return None


# Builtins' letters that take an argument (bash's getopt strings); `C` is a callback bash
# evaluates as shell text.
_CALLBACK_LETTERS = {
    "mapfile": "dunOCcs",
    "readarray": "dunOCcs",
    "compgen": "ACFGPSWXo",
    "complete": "ACFGPSWXo",
}


def _getopt_values(args: list[str], with_argument: str, letter: str) -> Iterator[str]:
    """Every value `-<letter>` takes in `args` read as getopt does: alone or in a cluster
    (`-tC cmd`, `-tCcmd`), each occurrence (the last one wins, but each is judged)."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--" or not arg.startswith("-") or arg == "-":
            return
        for k, found in enumerate(arg[1:], start=2):
            if found in with_argument:
                value = arg[k:] or (args[i + 1] if i + 1 < len(args) else "")
                if found == letter:
                    yield value
                if not arg[k:]:
                    i += 1
                break
        i += 1


def _callback_scripts(name: str, args: list[str], stdin_texts: Sequence[str]) -> Iterator[str]:
    """`mapfile -C cmd`, `compgen -C cmd`: each callback, in a cluster too."""
    for script in _getopt_values(args, _CALLBACK_LETTERS[name], "C"):
        if is_dynamic(script):
            note_unreadable(f"{name} runs a script built by expansion: {script}")
        yield script


def _fc_scripts(name: str, args: list[str], stdin_texts: Sequence[str]) -> Iterator[str]:
    """`fc -e PROG` runs PROG on a file of history, then runs what it leaves there; `fc -s`
    and `fc -e -` re-run history. History (`history -s`, an earlier call of a session) is
    text the reader cannot see, so anything but listing it (`fc -l`) is unreadable."""
    flags = "".join(
        arg[1:].split("e", 1)[0]  # what follows `e` is its value
        for arg in itertools.takewhile(lambda arg: arg != "--", args)
        if arg.startswith("-") and arg[1:2].isalpha()
    )
    editors = list(_getopt_values(args, "e", "e"))
    if "l" in flags:
        return
    note_unreadable("fc runs commands from history, which the reader cannot see")
    for editor in editors:
        if editor != "-":
            if is_dynamic(editor):
                note_unreadable(f"fc runs an editor built by expansion: {editor}")
            yield editor


@dataclass(frozen=True, slots=True)
class _CodeOptions:
    """A program's options whose value it runs as shell text (from its manual).

    `options`: the value, as the next word, after `=` (long) or attached (short), is the
    command. `keyed`: the value is `KEY=command` (or `KEY command`, `KEY = command`, as ssh
    reads a config line) for the `keys` given. `clusters`: the program reads short options with
    getopt, so one may end a cluster (`rsync -avze CMD`, `ssh -voProxyCommand=CMD`).
    `abbreviated`: it reads long options with getopt_long (or alike), which takes any prefix of
    one (`--to-comm`); `exact`: its other long options that are a prefix of a code option.
    """

    options: tuple[str, ...]
    keyed: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()
    clusters: bool = False
    abbreviated: bool = False
    exact: tuple[str, ...] = ()


_SSH_KEYS = ("proxycommand", "localcommand", "knownhostscommand")
_CODE_OPTIONS: dict[str, _CodeOptions] = {
    "git": _CodeOptions(
        tuple(
            [
                "-x",
                "--extcmd",
                "--upload-pack",
                "--receive-pack",
                "--exec",
                "-u",
                "--sendmail-cmd",
                "--to-cmd",
                "--cc-cmd",
                "--header-cmd",
                "--tree-filter",
                "--index-filter",
                "--msg-filter",
                "--env-filter",
                "--commit-filter",
                "--parent-filter",
                "--tag-name-filter",
                "--setup",
            ]
        )
    ),
    "tar": _CodeOptions(
        (
            "--to-command",
            "--use-compress-program",
            "-I",
            "--info-script",
            "-F",
            "--new-volume-script",
            "--rsh-command",
            "--rmt-command",
        ),
        ("--checkpoint-action",),
        ("exec",),
        clusters=True,
        abbreviated=True,
        exact=("--checkpoint",),
    ),
    "zip": _CodeOptions(("-TT", "--unzip-command"), abbreviated=True),
    "rsync": _CodeOptions(("-e", "--rsh", "--rsync-path"), clusters=True, abbreviated=True),
    "ssh": _CodeOptions((), ("-o",), _SSH_KEYS, clusters=True),
    "scp": _CodeOptions(("-S",), ("-o",), _SSH_KEYS, clusters=True),
    "sftp": _CodeOptions(("-S",), ("-o",), _SSH_KEYS, clusters=True),
    "man": _CodeOptions(("-P", "--pager", "-H", "--html"), clusters=True, abbreviated=True),
    "parallel": _CodeOptions(("--ssh", "--compress-program", "--decompress-program", "--limit")),
    "split": _CodeOptions(("--filter",), abbreviated=True),
    "npm": _CodeOptions(("--script-shell",)),
}
_KEYED_VALUE = re.compile(r"\s*([A-Za-z][\w-]*)\s*(?:=\s*|\s+)(.*)", re.DOTALL)


def _option_value(option: str, arg: str, following: str | None, spec: _CodeOptions) -> str | None:
    """The value `arg` gives `option` (the next word, `--opt=value`, `-Ovalue`), or None."""
    if arg == option:
        return following
    if option.startswith("--") and spec.abbreviated:
        matched, value = long_option(arg, option, spec.exact)
        if not matched:
            return None
        return following if value is None else value
    if option.startswith("--"):
        return arg[len(option) + 1 :] if arg.startswith(option + "=") else None
    return arg[len(option) :] if arg.startswith(option) and len(arg) > len(option) else None


def _cluster_value(spec: _CodeOptions, arg: str, following: str | None) -> tuple[str, str] | None:
    """`-avze CMD` / `-voKEY=CMD`: a code option ending or inside a getopt cluster."""
    if not spec.clusters or not arg.startswith("-") or arg.startswith("--"):
        return None
    for k, letter in enumerate(arg[1:], start=2):
        option = "-" + letter
        if option in spec.options or option in spec.keyed:
            return option, arg[k:] or (following or "")
    return None


# GNU tar's letters that take an argument; in its old-style first word (`tar cIf PROG A f`),
# each takes the next word after that first word, in order. `I` (a compression program) and
# `F` (the info script) run what they are given.
_TAR_LETTERS_WITH_ARGUMENT = frozenset("bCfFgHIKLNTVX")
_TAR_RUNNING_LETTERS = frozenset("IF")


def _tar_old_style_scripts(args: list[str]) -> Iterator[str]:
    """What `I` and `F` take in tar's old-style letters (`tar cIf PROG a.tar f`)."""
    if not args or not args[0].isalnum():
        return
    following = 1
    for letter in args[0]:
        if letter not in _TAR_LETTERS_WITH_ARGUMENT:
            continue
        if following >= len(args):
            return
        if letter in _TAR_RUNNING_LETTERS:
            value = args[following]
            if is_dynamic(value):
                note_unreadable(f"tar runs a program built by expansion: {value}")
            yield value
        following += 1


def _option_scripts(name: str, args: list[str]) -> Iterator[str]:
    """Values of `_CODE_OPTIONS` among `args` (`rsync -e CMD`, `ssh -oProxyCommand=CMD`, `tar
    --checkpoint-action=exec=CMD`)."""
    spec = _CODE_OPTIONS.get(name)
    if spec is None:
        return
    if name == "tar":
        yield from _tar_old_style_scripts(args)
    for i, arg in enumerate(args):
        following = args[i + 1] if i + 1 < len(args) else None
        found: tuple[str, str] | None = None
        for option in (*spec.options, *spec.keyed):
            value = _option_value(option, arg, following, spec)
            if value is not None:
                found = option, value
                break
        found = found or _cluster_value(spec, arg, following)
        if found is None:
            continue
        option, value = found
        if option in spec.keyed:
            keyed = _KEYED_VALUE.fullmatch(value)
            if keyed is None or keyed.group(1).casefold() not in spec.keys:
                continue
            value = keyed.group(2)
        if is_dynamic(value):
            note_unreadable(f"{name} runs shell text built by expansion: {value}")
        yield value


# Programs that start a shell when given no command (from their manuals): `chroot DIR`,
# `su USER`, `script`, `newgrp`, `sudo -s`, … That shell reads its stdin as the script.
_SHELL_WHEN_NO_COMMAND = frozenset(
    {"chroot", "unshare", "nsenter", "setarch", "linux32", "linux64", "sudo", "doas"}
)
_SHELL_STARTERS = frozenset({"su", "runuser", "script", "newgrp", "sg", "login", "ksu"})


def _starts_shell_on_stdin(name: str, args: list[str]) -> bool:
    """`su root <<< …`, `chroot /`, `sudo -s`, `script -q /dev/null`: a shell that reads stdin."""
    if name in _SHELL_STARTERS:
        if name == "runuser" and any(arg in ("-u", "--user") for arg in args):
            return False
        if name == "sg":
            return len([arg for arg in args if not arg.startswith("-")]) <= 1
        return _script_option(name, args) is None
    if name in _SHELL_WHEN_NO_COMMAND:
        spec = WRAPPERS[name]
        inner = skip_options_all([name, *args], spec)
        if name in ("sudo", "doas"):
            shell_flag = any(
                long_option(arg, "--shell")[0]
                or long_option(arg, "--login")[0]  # (also `--sh`, `--logi`: getopt_long)
                or (arg.startswith("-") and not arg.startswith("--") and ("s" in arg or "i" in arg))
                for arg in args
            )
            return shell_flag and any(not words for words in inner)
        return any(not words for words in inner)
    return False


def _assignment_words(words: list[str]) -> list[str]:
    """The words that assign a variable: those before the command name, those `env` sets for
    the command it runs (`env -i PAGER=… git log`), and the arguments of `export`, `declare`,
    `local`, `readonly`, `typeset` (`echo PAGER=$PAGER` assigns nothing)."""
    i = 0
    while i < len(words) and ASSIGNMENT_WORD.match(words[i]):
        i += 1
    if i < len(words) and basename(words[i]) in _DECLARERS:
        return [word for word in words if not word.startswith("-")]
    if i < len(words) and basename(words[i]) == "env":
        return words[:i] + wrapper_assignments(words[i:], WRAPPERS["env"])
    return words[:i]


def embedded_scripts(words: list[str], stdin_texts: Sequence[str]) -> Iterator[str]:
    """Shell text a command hands to another shell: `bash -c`, `eval`, `su -c`, `watch`, …

    Text that cannot be known statically is noted as unreadable instead.
    """
    name = basename(words[0])
    args = words[1:]
    yield from _option_scripts(name, args)
    if name == "git":
        yield from _git_scripts(args)
    elif name in ("make", "gmake"):
        # `make SHELL=prog` runs every recipe with that program.
        yield from (arg.split("=", 1)[1] for arg in args if arg.startswith("SHELL="))
    elif name == "parallel":
        yield from _parallel_scripts(args)
    if _starts_shell_on_stdin(name, args):
        yield from stdin_texts
    yield from _assigned_scripts(words)
    handler = _SCRIPT_HANDLERS.get(name, _option_script)
    yield from handler(name, args, stdin_texts)


def _git_scripts(args: list[str]) -> Iterator[str]:
    """`ext::CMD` remotes and `git -c key=value` settings whose value git runs."""
    for arg in args:
        if arg.startswith("ext::"):
            yield arg[5:].replace("% ", " ").replace("%%", "%")  # `%` escapes a blank
    for option, value in itertools.pairwise(args):
        if option == "-c" and _GIT_CODE_KEY.match(value):
            if is_dynamic(value):
                note_unreadable("git -c sets a command built by expansion")
            yield from _git_setting_scripts(*value.partition("=")[::2])
        if option == "--config-env" and _GIT_CODE_KEY.match(value):
            note_unreadable("git --config-env takes a command from the environment")
    for arg in args:
        if arg.startswith("--config-env=") and _GIT_CODE_KEY.match(arg.split("=", 1)[1]):
            note_unreadable("git --config-env takes a command from the environment")
    yield from _git_subcommand_scripts(args)


# Git subcommands that run a command given as their operands (`git bisect run CMD ARGS`,
# `git submodule foreach 'CMD'`) and `git config KEY VALUE` for a key git runs.
_GIT_CONFIG_ARG_OPTIONS = frozenset({"-f", "--file", "--blob", "--type", "--default", "--comment"})


# `git grep` letters that take a value (which may hold an `O`); `-O<pager>` opens the files in
# that pager, a command git runs.
_GIT_GREP_LETTERS_WITH_VALUE = frozenset("efABCm")


def _git_grep_pagers(args: list[str]) -> Iterator[str]:
    """`git grep -Oprog`, `-iOprog`, `--open-files-in-pager=prog` (any prefix from `--op`, as
    git's option parser takes a unique one): the value is optional, so only attached."""
    for arg in args:
        if arg == "--":
            return
        if arg.startswith("--op") and "=" in arg:
            name, value = arg[2:].split("=", 1)
            if "open-files-in-pager".startswith(name):
                yield value
        elif arg.startswith("-") and not arg.startswith("--"):
            for k, letter in enumerate(arg[1:], start=2):
                if letter in _GIT_GREP_LETTERS_WITH_VALUE:
                    break
                if letter == "O":
                    if arg[k:]:
                        yield arg[k:]
                    break


def _git_subcommand_scripts(args: list[str]) -> Iterator[str]:
    for i, arg in enumerate(args):
        rest = args[i + 1 :]
        if arg == "grep":
            for pager in _git_grep_pagers(rest):
                if is_dynamic(pager):
                    note_unreadable("git grep -O runs a pager built by expansion")
                yield pager
        if arg == "bisect" and rest[:1] == ["run"] and len(rest) > 1:
            yield " ".join(rest[1:])
        elif arg == "submodule" and "foreach" in rest:
            command = [word for word in rest[rest.index("foreach") + 1 :] if word[:2] != "--"]
            if command:
                if any(is_dynamic(word) for word in command):
                    note_unreadable("git submodule foreach runs a command built by expansion")
                yield " ".join(command)
        elif arg == "config":
            operands: list[str] = []
            j = 0
            while j < len(rest):
                word = rest[j]
                if word in _GIT_CONFIG_ARG_OPTIONS:
                    j += 2
                    continue
                # Options stop at the key: a value may start with `-` (`alias.x '-c …'`).
                if not word.startswith("-") or operands[-1:] not in ([], ["set"], ["add"]):
                    operands.append(word)
                j += 1
            if operands[:1] in (["set"], ["add"]):
                operands = operands[1:]
            if len(operands) >= 2 and _GIT_CODE_KEY.match(operands[0] + "="):
                if is_dynamic(operands[1]):
                    note_unreadable("git config sets a command built by expansion")
                yield from _git_setting_scripts(operands[0], operands[1])


def _parallel_scripts(args: list[str]) -> Iterator[str]:
    """GNU parallel runs each argument after `:::` as shell text (after the command, if any)."""
    if ":::" not in args:
        return
    cut = args.index(":::")
    for command in skip_options_all(["parallel", *args[:cut]], WRAPPERS["parallel"]):
        for value in args[cut + 1 :]:
            if value not in (":::", "::::", ":::+"):
                yield " ".join([*command, value])


def _assigned_scripts(words: list[str]) -> Iterator[str]:
    """Values of variables bash or a program it starts runs (`PAGER=…`, `GIT_SSH_COMMAND=…`),
    and assignments that make a command name run something else (`BASH_CMDS`, `BASH_ENV`)."""
    assignments = _assignment_words(words)
    keys = dict(
        word.split("=", 1)
        for word in assignments
        if word.startswith("GIT_CONFIG_KEY_") and "=" in word and not is_dynamic(word)
    )
    yield from _default_assignment_scripts(words)
    for word in assignments:
        _note_command_table_assignment(word)
        if "=" not in word:
            continue
        variable, value = word.split("=", 1)
        variable = variable.rstrip("+")
        if _is_code_variable(variable):
            if is_dynamic(word):
                note_unreadable(f"{variable} set to a value built by expansion")
            yield from _code_values(variable, value, keys)


_DEFAULT_ASSIGNMENT = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*):?=")


def _default_assignment_scripts(words: list[str]) -> Iterator[str]:
    """`${PS4=…}` and `${PS4:=…}` in any word assign the variable as `PS4=…` does: its value,
    quotes removed, is read as the value of a variable bash runs."""
    for word in words:
        for found in _DEFAULT_ASSIGNMENT.finditer(word):
            if not _is_code_variable(found.group(1)):
                continue
            value = word[found.end() : word.rfind("}")]
            if has_expansion(_LITERAL_PARTS.sub("", value)):  # `$x` and `$(…)`, not `'$(…)'`
                note_unreadable(f"{found.group(1)} set to a value built by expansion")
            yield value.translate(_QUOTE_CHARACTERS)


_QUOTE_CHARACTERS = str.maketrans("", "", "'\"\\")
_LITERAL_PARTS = re.compile(r"'[^']*'|\\.", re.DOTALL)


def _note_command_table_assignment(word: str) -> None:
    """`BASH_CMDS[x]=…`, `BASH_ALIASES[x]=…` and a `BASH_ENV`/`ENV` built by expansion change
    what a later command runs in ways the text does not show."""
    if word.startswith(("BASH_CMDS[", "BASH_CMDS=", "BASH_CMDS+=")):
        note_unreadable("BASH_CMDS makes a command name run another program")
    if word.startswith(("BASH_ALIASES[", "BASH_ALIASES=", "BASH_ALIASES+=")):
        note_unreadable("BASH_ALIASES makes a command name run another command")
    if word.startswith(_SCRIPT_PATH_VARIABLES) and is_dynamic(word):
        # The script a shell sources first (`BASH_ENV=<(…) bash -c x`), as `. "$f"` is.
        variable = word.split("=", 1)[0].rstrip("+")
        note_unreadable(f"{variable} names a script built by expansion")


def _shell_scripts(name: str, args: list[str], stdin_texts: Sequence[str]) -> Iterator[str]:
    """`bash -c SCRIPT`, `bash` reading its stdin, or `bash FILE` (a file named by expansion is
    unreadable)."""
    script, script_file = _shell_script(args)
    if _names_stdin(script_file):
        script_file = None
    if script is not None:
        if is_dynamic(script):
            note_unreadable(f"{name} -c runs a script built by expansion: {script}")
        yield script
        # The script inherits the stdin (`bash -c bash <<< …`): it may run it too.
        yield from stdin_texts
    elif script_file is None:
        yield from stdin_texts
    elif is_dynamic(script_file):
        note_unreadable(f"{name} reads a script from an expansion: {script_file}")


def _eval_script(name: str, args: list[str], stdin_texts: Sequence[str]) -> Iterator[str]:
    args = args[args[:1] == ["--"] :]  # `eval -- …`: bash's eval ends its options there
    if not args:
        return
    if any(is_dynamic(arg) for arg in args):
        note_unreadable("eval of a non-literal argument")
    yield " ".join(args)


def _sourced_script(name: str, args: list[str], stdin_texts: Sequence[str]) -> Iterator[str]:
    """`source FILE`: a file named by expansion is unreadable; `source /dev/stdin` reads stdin."""
    path = next((arg for arg in args if arg != "--"), None)
    if path is not None and is_dynamic(path):
        note_unreadable(f"{name} reads a script from an expansion: {path}")
    elif _names_stdin(path):
        yield from stdin_texts


def _alias_values(name: str, args: list[str], stdin_texts: Sequence[str]) -> Iterator[str]:
    """An alias's value is code bash runs where the alias is used (see `ALIASES`)."""
    aliases = ALIASES.get()
    for arg in args:
        if "=" in arg and not arg.startswith("-"):
            if is_dynamic(arg):
                note_unreadable("alias defined with a value built by expansion")
            alias, value = arg.split("=", 1)
            if aliases is not None:
                aliases[alias] = value
            yield value


def _hashed_path(name: str, args: list[str], stdin_texts: Sequence[str]) -> Iterator[str]:
    if any(arg.startswith("-") and "p" in arg for arg in args):
        note_unreadable("hash -p makes a command name run another program")
    return iter(())


def _trap_handler(name: str, args: list[str], stdin_texts: Sequence[str]) -> Iterator[str]:
    handler = next((arg for arg in args if arg not in ("--",)), None)
    if handler is not None and handler not in ("-", "-p", "-l", ""):
        if is_dynamic(handler):
            note_unreadable("trap with code built by expansion")
        yield handler


_WATCH = Wrapper(short_with_arg="nqsd", long_with_arg=frozenset({"--interval", "--differences"}))


def _watched_command(name: str, args: list[str], stdin_texts: Sequence[str]) -> Iterator[str]:
    inner = skip_options([name, *args], _WATCH)
    if inner:
        if any(is_dynamic(word) for word in inner):
            note_unreadable("watch runs a command built by expansion")
        yield " ".join(inner)


# tmux commands that run a shell command: the letters of their options that take a value (from
# tmux(1)). tmux joins the words after the options into one command, as `sh -c` would read it.
_TMUX_RUNNERS: dict[str, str] = {
    **dict.fromkeys(("new-session", "new"), "cefnstxyF"),
    **dict.fromkeys(("new-window", "neww"), "cenftF"),
    **dict.fromkeys(("split-window", "splitw"), "celftF"),
    **dict.fromkeys(("respawn-pane", "respawnp", "respawn-window", "respawnw"), "cet"),
    **dict.fromkeys(("run-shell", "run"), "cdt"),
    **dict.fromkeys(("pipe-pane", "pipep"), "t"),
    **dict.fromkeys(("display-popup", "popup"), "bcdehsStTwxy"),
}
# tmux commands that run tmux commands or shell text in forms not modelled here (a command a
# key runs, a hook, `if-shell`'s branches, keys typed into a pane's shell, a file of commands).
_TMUX_UNMODELLED = frozenset(
    {"if-shell", "if", "bind-key", "bind", "set-hook", "confirm-before", "confirm"}
    | {"command-prompt", "display-menu", "menu", "send-keys", "send", "source-file", "source"}
)
# Global options of tmux that take a value (`-c` is a shell command tmux runs, as `sh -c`).
_TMUX_GLOBAL_VALUES = "cfLST"


def _tmux_scripts(name: str, args: list[str], stdin_texts: Sequence[str]) -> Iterator[str]:
    """What `tmux` runs: `tmux -c CMD`, and for each command of a sequence (a `;` word, `\\;`
    to the shell, separates them) the shell command of `new`, `neww`, `splitw`, `respawnp`,
    `run`, `pipep` or `popup`, its words joined. A format running `#(…)` and the commands
    `_TMUX_UNMODELLED` names are noted unreadable."""
    i = 0
    while i < len(args) and args[i].startswith("-") and len(args[i]) > 1:
        letter = args[i][-1]
        if letter == "c" or (len(args[i]) == 2 and letter in _TMUX_GLOBAL_VALUES):
            value = args[i + 1] if i + 1 < len(args) else ""
            if letter == "c":
                if is_dynamic(value):
                    note_unreadable(f"tmux -c runs a script built by expansion: {value}")
                yield value
            i += 2
        else:
            i += 1
    if any("#(" in arg for arg in args):
        note_unreadable("tmux runs a shell command in a format: #(…)")
    command: list[str] = []
    for word in [*args[i:], ";"]:
        if not word.endswith(";"):
            command.append(word)
            continue
        if word != ";":
            command.append(word[:-1])  # `new -d\;` ends a command too
        yield from _tmux_command(command)
        command = []


def _tmux_command(words: list[str]) -> Iterator[str]:
    if not words:
        return
    verb, args = words[0], words[1:]
    if verb in _TMUX_UNMODELLED:
        note_unreadable(f"tmux {verb} runs commands this reader does not model")
        # Still judge each word as a command (`bind x run-shell 'rm x'`): only stricter.
        yield from (arg for arg in args if arg and not arg.startswith("-"))
        return
    values = _TMUX_RUNNERS.get(verb)
    if values is None:
        return
    i = 0
    while i < len(args) and args[i].startswith("-") and len(args[i]) > 1:
        if args[i] == "--":
            i += 1
            break
        # A cluster whose last letter takes a value takes the next word (`-dc dir`); a letter
        # that takes a value inside a cluster takes the rest of it (`-cdir`).
        flags = args[i][1:]
        taken = next((j for j, ch in enumerate(flags) if ch in values), None)
        i += 2 if taken == len(flags) - 1 else 1
    script = " ".join(args[i:])
    if script:
        if is_dynamic(script):
            note_unreadable(f"tmux {verb} runs a command built by expansion: {script}")
        yield script


def _option_script(name: str, args: list[str], stdin_texts: Sequence[str]) -> Iterator[str]:
    """`su -c`, `script -c`, `flock -c`, `env -S`, `mapfile -C`, …"""
    script = _script_option(name, args)
    if script is not None:
        if is_dynamic(script):
            note_unreadable(f"{name} runs a script built by expansion: {script}")
        yield script


# How each program that runs shell text given as an argument hands it over (the rest: by an
# option, `_option_script`).
_SCRIPT_HANDLERS: dict[str, Callable[[str, list[str], Sequence[str]], Iterator[str]]] = {
    **dict.fromkeys(_SHELLS, _shell_scripts),
    "eval": _eval_script,
    "source": _sourced_script,
    ".": _sourced_script,
    "alias": _alias_values,
    "hash": _hashed_path,
    "trap": _trap_handler,
    "watch": _watched_command,
    "tmux": _tmux_scripts,
    **dict.fromkeys(_CALLBACK_LETTERS, _callback_scripts),
    "fc": _fc_scripts,
}


_PRINTF_LITERAL_FORMAT = re.compile(r"(?:[^%\\]|\\n)*|(?:%[s%]|\\n|\s)*")


def _prints_literal_text(words: list[str]) -> bool:
    """`echo words`, `printf '%s\\n' words`, `cat` of a here-doc, `true`: what reaches the pipe
    is the words as read (`_piped_script_segments` reads them as a script)."""
    name = basename(words[0])
    args = words[1:]
    if name == "echo":
        return not any(arg.startswith("-") and "e" in arg for arg in args)
    if name == "printf":
        operands = args[args[:1] == ["--"] :]
        return bool(operands) and _PRINTF_LITERAL_FORMAT.fullmatch(operands[0]) is not None
    if name == "cat":
        return all(arg.startswith("-") for arg in args)
    return name in ("true", ":")


def note_computed_scripts(commands: list[SimpleCommand], readers: list[SimpleCommand]) -> None:
    """A shell reading its stdin from a pipe runs what the commands upstream print: unless they
    print literal text, that script is computed (`printf 'forb%s' idden | bash`, `base64 -d`,
    `tr`, `cat file`) and cannot be read."""
    for command in commands:
        if any(command is reader for reader in readers):
            continue
        words = strip_reserved(command.words)
        if words and not ASSIGNMENT_WORD.match(words[0]) and not _prints_literal_text(words):
            note_unreadable(f"a shell reads its script from what `{basename(words[0])}` prints")
            return


def shell_reads_stdin(words: list[str]) -> bool:
    """A bare shell (also under wrappers: `sudo bash`) that runs whatever its stdin holds."""
    queue: deque[list[str]] = deque([strip_reserved(words)])
    seen: set[tuple[str, ...]] = set()
    budget = MAX_VARIANTS + 4 * len(words)
    chars = 0
    while queue:
        if budget == 0 or chars > MAX_VARIANT_CHARS:
            if not note_limit("too many wrapper layers to unwrap"):
                raise LimitError("too many wrapper layers to unwrap")
            return False
        budget -= 1
        current = strip_reserved(queue.popleft())
        key = tuple(current)
        if not current or key in seen:
            continue
        seen.add(key)
        chars += sum(len(word) + 1 for word in current)
        name = basename(current[0])
        if name in _SHELLS:
            script, script_file = _shell_script(current[1:])
            if script is None and (script_file is None or _names_stdin(script_file)):
                return True
            if script is not None and XARGS_INPUT in script:
                return True  # `… | xargs -I{} bash -c {}`: the script is a line of the pipe
        elif (
            _sources_stdin(name, current[1:])
            or _stdin_runner(name, current[1:])
            or _starts_shell_on_stdin(name, current[1:])
        ):
            return True
        queue.extend(unwrapped_variants(current))
    return False


def _sources_stdin(name: str, args: list[str]) -> bool:
    return name in ("source", ".") and any(_names_stdin(arg) for arg in args[:1])


def _stdin_runner(name: str, args: list[str]) -> bool:
    """`at now`, `batch`, `crontab -` (also `at -f /dev/stdin`, `crontab /dev/stdin`): stdin is
    a script run later; GNU `parallel` given no command and no `:::` runs each line of its
    stdin as a command."""
    if name == "parallel":
        spec = WRAPPERS["parallel"]
        no_sources = not any(arg.startswith(("::::", ":::", "-a", "--arg-file")) for arg in args)
        return no_sources and any(not words for words in skip_options_all([name, *args], spec))
    if name not in _STDIN_RUNNERS:
        return False
    if name in ("at", "batch"):
        script_file = option_value(args, "-f", "-f")
        if script_file is not None:  # `at -f /dev/stdin now`: the job is stdin all the same
            return _names_stdin(script_file)
    if any(arg in ("-l", "-r", "-e") for arg in args):
        return False
    return name != "crontab" or not args or any(_names_stdin(arg) for arg in args)
