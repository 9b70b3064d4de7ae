"""docs/policy.md says what the reader reads, what it finds unreadable and what is out of its
sight: every line of those lists (each bullet, each paragraph of the wrappers section, each row
of the table) is backed here by commands that behave as the line says. A line with no entry
below fails, and so does an entry whose line is gone."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.policy.engine import PolicyDocument, RuleAction, evaluate
from app.policy.shell.syntax import read_command
from tests.reader_corpus import READER_POLICY

DOC = (Path(__file__).resolve().parent.parent / "docs" / "policy.md").read_text("utf-8")
POLICY = PolicyDocument.model_validate(READER_POLICY)
RM_RF = PolicyDocument.model_validate({"rules": [{"match": "rm -rf *", "approval": "deny"}]})
DEEP = "echo " + "$(" * 200 + "forbidden x" + ")" * 200

# What a line promises for a command: "deny" (read, the deny rule meets it), "rm-rf" (denied
# under a `rm -rf *` deny), "caught" (deny or prompt), "unreadable" (the reader says why it cannot
# read it, or cannot parse it or reaches a limit), "allow" (read and nothing to find), "unseen"
# (runs `forbidden` where the reader cannot see: allowed under READER_POLICY).
Backing = dict[str, list[tuple[str, str]]]

READ: Backing = {
    "the parts between": [
        ("true; forbidden x", "deny"),
        ("true && forbidden x", "deny"),
        ("true |& forbidden x", "deny"),
        ("true\nforbidden x", "deny"),
        ("true\n\\forbidden x", "deny"),
        ("true \\\r\nforbidden x", "deny"),
        ("cat <<EOF\n$((\nEOF\nforbidden x\n))\nEOF", "deny"),
    ],
    "the insides of": [
        ("echo $(forbidden x)", "deny"),
        ("echo `forbidden x`", "deny"),
        ("(forbidden x)", "deny"),
        ("{ forbidden x; }", "deny"),
        ("cat <(forbidden x)", "deny"),
        ("echo $((1 + $(forbidden x)))", "deny"),
        ("if true; then forbidden x; fi", "deny"),
        ("coproc w { forbidden x; }", "deny"),
        ("echo ${x:-`forbidden x`}", "deny"),
        ("echo $(( 0 + '$(forbidden x)' ))", "deny"),
        ("echo ${a['$(forbidden x)']}", "deny"),
        ("echo \"${x:-'$(forbidden x)'}\"", "deny"),
    ],
    "here-document bodies that expand": [
        ("cat <<EOF | sh\nforbidden x\nEOF", "deny"),
        ("echo 'forbidden x' | bash", "deny"),
        ("bash <<< 'forbidden x'", "deny"),
        ("echo forbidden x | bash", "deny"),
        ("echo 'forbidden x' | xargs -I{} sh -c {}", "deny"),
    ],
    "the scripts handed to another shell": [
        ("bash -c 'forbidden x'", "deny"),
        ("eval 'forbidden x'", "deny"),
    ],
    "a use of an alias the command defines": [("alias t='forbidden'\nt x", "deny")],
    "each of these again with its wrappers removed": [
        ("timeout 5 bash -c 'sudo forbidden x'", "deny")
    ],
    "A **wrapper** is a program": [
        ("sudo env A=1 nohup nice -n 5 timeout 5 forbidden x", "deny"),
        ("/usr/bin/forbidden x", "deny"),
        ("find . -exec forbidden x {} +", "deny"),
        ("find . -exec {} \\;", "unreadable"),
        ("sshpass -p pw forbidden x", "deny"),
        ("/lib64/ld-linux-x86-64.so.2 /usr/bin/forbidden x", "deny"),
        ("coreutils --coreutils-prog=forbidden x", "deny"),
        ("runcon ctx forbidden x", "deny"),
    ],
    "So a `rm -rf *` deny also stops": [
        ("timeout 5 rm -rf /x", "rm-rf"),
        ("sudo env A=1 nohup nice -n 5 timeout 5 rm -rf /x", "rm-rf"),
    ],
    "An **embedded script**": [
        ('sh -c "forbidden x"', "deny"),
        ("su -c 'forbidden x'", "deny"),
        ("runuser -c 'forbidden x'", "deny"),
        ("script --command 'forbidden x'", "deny"),
        ("env -S 'forbidden x'", "deny"),
        ("watch 'forbidden x'", "deny"),
        ("su -lc'forbidden x'", "deny"),
        ("script -qc'forbidden x' /dev/null", "deny"),
        ("tmux new -d forbidden x", "deny"),
        ("tmux -c 'forbidden x'", "deny"),
        ("tmux send-keys -t main ls Enter", "unreadable"),
    ],
    "Each wrapper's options are modelled": [
        ("unshare -S 0 forbidden x", "deny"),
        ("nsenter --setuid 0 forbidden x", "deny"),
        ("strace --output f forbidden x", "deny"),
        ("chrt --sched-runtime 0 -o 0 forbidden x", "deny"),
        ("unshare --frobnicate 0 forbidden x", "deny"),
        ("setarch x86_64 -R forbidden x", "deny"),
        ("setarch -R x86_64 forbidden x", "deny"),
        ("parallel --jobs 2 ::: 'forbidden x'", "deny"),
        ("sg root 'forbidden x'", "deny"),
        ("su --session-command 'forbidden x'", "deny"),
        ("env -iS 'forbidden x'", "deny"),
        ("echo 'forbidden x' | parallel", "deny"),
        ("env 'BASH_FUNC_f%%=() { forbidden x; }' bash -c f", "deny"),
    ],
    "Programs that **start a shell reading its stdin**": [
        ("su root <<< 'forbidden x'", "deny"),
        ("newgrp <<< 'forbidden x'", "deny"),
        ("chroot / <<< 'forbidden x'", "deny"),
        ("sudo -s <<< 'forbidden x'", "deny"),
        ("bash -c bash <<< 'forbidden x'", "deny"),
        ("at now <<< 'forbidden x'", "deny"),
        ("at -f /dev/stdin now <<< 'forbidden x'", "deny"),
    ],
    "**Program options that run shell text**": [
        ("git -c core.pager='forbidden x' log", "deny"),
        ("git difftool -x 'forbidden x'", "deny"),
        ("git ls-remote 'ext::forbidden% x'", "deny"),
        ("tar -xf a.tar --to-command='forbidden x'", "deny"),
        ("tar -I 'forbidden x' -xf a", "deny"),
        ("tar cIf forbidden /dev/null f", "deny"),
        ("tar -cf x --checkpoint-action=exec='forbidden x' a", "deny"),
        ("tar -xf a.tar --to-comm='forbidden x'", "deny"),
        ("su --comm='forbidden x'", "deny"),
        ("env --spl='forbidden x'", "deny"),
        ("split -l 1 --fil 'forbidden x' f", "deny"),
        ("zip -TT 'forbidden x' a.zip b", "deny"),
        ("rsync --rsh 'forbidden x' a b:c", "deny"),
        ("ssh -o 'ProxyCommand forbidden x' host", "deny"),
        ("ssh -o 'ProxyCommand = forbidden x' host", "deny"),
        ("scp -o LocalCommand='forbidden x' a b:c", "deny"),
        ("man -P 'forbidden x' ls", "deny"),
        ("parallel --ssh 'forbidden x' ::: a", "deny"),
        ("rsync -avze 'forbidden x' a b:c", "deny"),
        ("ssh -vo ProxyCommand='forbidden x' host", "deny"),
        ("git bisect run forbidden x", "deny"),
        ("git submodule foreach 'forbidden x'", "deny"),
        ("git filter-branch --msg-filter 'forbidden x' HEAD", "deny"),
        ("git send-email --sendmail-cmd='forbidden x' a.patch", "deny"),
        ("git rebase -x 'forbidden x' HEAD~1", "deny"),
        ("git config core.pager 'forbidden x'", "deny"),
        ("git --config-env=core.pager=V log", "unreadable"),
        ("TAR_OPTIONS='--to-command=forbidden x' tar x", "deny"),
        ("ZIPOPT='-TT forbidden' zip a.zip b", "deny"),
        ("MANOPT='-P forbidden' man ls", "deny"),
        ("export PARALLEL='--ssh forbidden'; parallel ::: a", "deny"),
        ("GIT_CONFIG_VALUE_0='!forbidden x' git x", "deny"),
        ("RSYNC_RSH='forbidden x' rsync a b:c", "deny"),
        ("env -i PAGER='forbidden x' git log", "deny"),
        ("declare -x GIT_SSH_COMMAND='forbidden x'; git fetch", "deny"),
        ('echo "PAGER=$PAGER"', "allow"),
        ("split --filter='forbidden x' f", "deny"),
        ("npm test --script-shell=forbidden", "deny"),
        ("make SHELL=forbidden", "deny"),
    ],
    "An ANSI-C string is read as bash reads it": [
        ("$'forbidden\\0x' y", "deny"),
        ("$'forbidden\\x00x' y", "deny"),
        ("$'forbidden\\u0000' y", "deny"),
        ("$'forbidden\\c@x' y", "deny"),
        ("for n do forbidden x; done", "deny"),
    ],
    "There is no limit a command can use to escape this": [(DEEP, "caught")],
}

UNREADABLE: Backing = {
    "its **command name is computed**": [
        ("$x -rf /", "unreadable"),
        ("{rm,} -rf x", "unreadable"),
        ("r?m x", "unreadable"),
    ],
    "it **makes a name run something else**": [
        ("hash -p /bin/forbidden ls", "unreadable"),
        ("BASH_ALIASES+=([x]=forbidden)", "unreadable"),
    ],
    "it **keeps code in a string**": [
        ('trap "$c" EXIT', "unreadable"),
        ('eval "$c"', "unreadable"),
        ("x='a[$(cmd)]'; echo $((x))", "caught"),
    ],
    "it **runs a script the policy cannot see**": [
        ("bash <(echo x)", "unreadable"),
        ('. "$f"', "unreadable"),
        ("BASH_ENV=<(echo x) bash -c x", "unreadable"),
        ("tmux if-shell 'test -f x' ''", "unreadable"),
        ("tmux display -p '#(date)'", "unreadable"),
    ],
    "a **shell reads computed text on its stdin**": [
        ("printf 'forb%s x' idden | bash", "unreadable"),
        ("cat notes.txt | sh", "unreadable"),
        ("exec 3< <(echo x); bash <&3", "unreadable"),
    ],
    "it **sets a variable bash runs to run-time text**": [
        ('printf -v PS4 "%s" "$x"', "unreadable"),
        ("IFS= read -r PS4 < f", "unreadable"),
        ("bash --rcfile <(echo x) -ic true", "unreadable"),
        ("declare -n r=$x", "unreadable"),
        ("declare -n r; r=$x; echo $r", "unreadable"),
        ("declare -n h=BASH_CMDS", "unreadable"),
        ('TAR_OPTIONS="$o" tar x', "unreadable"),
        ("git --config-env=core.pager=V log", "unreadable"),
    ],
    "is **evaluated** as arithmetic or as": [
        ("x=$1; echo ${!x}", "unreadable"),
        ("x=$1; a=(1); echo ${#a[x]}", "unreadable"),
        ("x=$1; a=(1 2); echo ${a[@]:x}", "unreadable"),
        ("x=$1; a[x]=1", "unreadable"),
        ("x=$1; unset 'a[x]'", "unreadable"),
        ("x=$1; [[ -v a[x] ]]", "unreadable"),
        ('x=$1; test -v "$x"', "unreadable"),
        ("x=$1; typeset -i i; i=x", "unreadable"),
        ("x=$1; declare -n r=x; echo $((r))", "unreadable"),
    ],
    "it **exceeds a limit**": [(DEEP, "unreadable")],
}

UNSEEN: Backing = {
    "an interpreter's own code": [
        ("python3 -c 'import os; os.system(\"forbidden x\")'", "unseen"),
        ("awk 'BEGIN{system(\"forbidden x\")}'", "unseen"),
        ("sed '1e forbidden x' f", "unseen"),
    ],
    "a script file written earlier": [
        ("bash s.sh", "unseen"),
        ("parallel -a cmds.txt", "unseen"),
        ("parallel :::: cmds.txt", "unseen"),
    ],
    "keystrokes typed into an approved or allowed PTY": [("bash", "unseen")],
    "a script file fed to a shell's stdin": [("bash < s.sh", "unseen")],
    "a remote host": [("ssh host 'forbidden x'", "unseen")],
    "a file under another name": [("cat notes.txt", "unseen")],
    "a shell or runner the reader does not model": [
        ("ksh93 -c 'forbidden x'", "unseen"),
        ("bash5 -c 'forbidden x'", "unseen"),
    ],
    "functions and aliases a session defined earlier": [("ll x", "unseen")],
}


def _section(heading: str) -> str:
    start = DOC.index(f"\n## {heading}\n")
    end = DOC.find("\n## ", start + 1)
    return DOC[start : end if end > 0 else len(DOC)]


def _bullets(text: str) -> list[str]:
    items: list[str] = []
    for line in text.splitlines():
        if line.startswith("- "):
            items.append(line)
        elif line.startswith("  ") and items:
            items[-1] += " " + line.strip()
    return items


def _paragraphs(text: str) -> list[str]:
    blocks = [block.strip() for block in text.split("\n\n")[1:]]
    return [block for block in blocks if block and not block.startswith(("- ", "|", "#"))]


def _rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| ")][2:]


LINES: list[tuple[str, list[str], Backing]] = [
    ("How deny and prompt match", _bullets(_section("How deny and prompt match")), READ),
    ("Wrappers and embedded scripts", _paragraphs(_section("Wrappers and embedded scripts")), READ),
    ("Unreadable commands", _bullets(_section("Unreadable commands")), UNREADABLE),
    ("What the policy cannot see", _rows(_section("What the policy cannot see")), UNSEEN),
]


@pytest.mark.parametrize(
    ("section", "line", "backing"),
    [(section, line, backing) for section, lines, backing in LINES for line in lines],
    ids=[f"{section}:{line[:50]}" for section, lines, _ in LINES for line in lines],
)
def test_every_line_of_the_reader_s_lists_has_a_test(
    section: str, line: str, backing: Backing
) -> None:
    keys = [key for key in backing if key in " ".join(line.split())]
    assert keys, f"docs/policy.md, section {section}, has a line no test backs: {line[:120]}"


@pytest.mark.parametrize(
    "backing", [READ, UNREADABLE, UNSEEN], ids=["read", "unreadable", "unseen"]
)
def test_every_backed_line_is_still_in_the_docs(backing: Backing) -> None:
    flat = " ".join(DOC.split())
    assert [key for key in backing if key not in flat] == []


CASES = [
    (command, promise)
    for backing in (READ, UNREADABLE, UNSEEN)
    for v in backing.values()
    for command, promise in v
]


@pytest.mark.parametrize(("command", "promise"), CASES, ids=[c[:60] for c, _ in CASES])
def test_each_backing_command_does_what_its_line_says(command: str, promise: str) -> None:
    verdict = evaluate(RM_RF if promise == "rm-rf" else POLICY, command)
    reading = read_command(command)
    unreadable = bool(reading.unreadable) or reading.parse_error is not None
    if promise in ("deny", "rm-rf"):
        assert verdict.approval is RuleAction.deny, verdict
    elif promise == "caught":
        assert verdict.approval is not RuleAction.allow, verdict
    elif promise == "unreadable":
        assert unreadable or reading.limit_reached is not None, reading
        assert verdict.approval is not RuleAction.allow, verdict
    elif promise == "allow":
        assert verdict.approval is RuleAction.allow and not unreadable, verdict
    else:
        assert promise == "unseen"
        assert verdict.approval is RuleAction.allow, verdict
