"""No shell text may crash the process that reads it (tree-sitter-bash runs in the server).

tree-sitter-bash 0.25.1 reads past a C table on a character above U+00FF right after `{`
(`{𱡀`, `{1..𱡀`); the process dies with SIGSEGV when that read lands on an unmapped page, which
depends on the memory layout of the run. These tests pick such characters from the layout of
the very process under test, so they crash an unguarded parser every time they run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.policy.shell.syntax import read_command
from app.policy.shell.tree import _scanner_safe
from tests.ctype_layout import CtypeTable
from tests.databases import ServerDatabase
from tests.faults.server_process import server_env, server_process

ROOT = Path(__file__).resolve().parents[1]
LAYOUT_ATTEMPTS = 12  # a layout with a hole past the table shows up in about half the runs

# In a child shaped like the server (its imports decide the memory map): find characters whose
# lookup is unmapped; show that the raw parser dies on one of them in this very layout (in a
# fork, which keeps the layout); then read them through `read_command`.
_CHILD = r"""
import json, os, sys
import app.main  # noqa: F401
from app.policy.shell.syntax import read_command
from app.policy.shell.tree import _parser
from tests.ctype_layout import CtypeTable
from tests.databases import ServerDatabase

table = CtypeTable.of_this_process()
unmapped = table.unmapped_lookups("self") if table else []
if not unmapped:
    sys.exit(3)
picked = [unmapped[0], unmapped[len(unmapped) // 2], unmapped[-1]]
pid = os.fork()
if pid == 0:
    _parser().parse(("{" + chr(picked[1])).encode())
    os._exit(0)
_, status = os.waitpid(pid, 0)
raw_signal = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
segments = {}
for code_point in picked:
    c = chr(code_point)
    variants = (f"echo {{{c}", f"{{{c}", f"echo {{1..{c}}}", f"x {{12{c}; rm -rf /nonexistent-x")
    for command in variants:
        segments[command] = list(read_command(command).segments)
print(json.dumps({"raw_signal": raw_signal, "segments": segments}))
"""


def _hostile_child_run() -> dict[str, object]:
    for _attempt in range(LAYOUT_ATTEMPTS):
        child = subprocess.run(
            [sys.executable, "-X", "faulthandler", "-c", _CHILD],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if child.returncode == 3:
            continue  # no hole past the table in this layout: nothing can crash, try again
        assert child.returncode == 0, f"reader crashed (rc {child.returncode}):\n{child.stderr}"
        result: dict[str, object] = json.loads(child.stdout.splitlines()[-1])
        return result
    pytest.skip(f"no memory layout with a hole past the ctype table in {LAYOUT_ATTEMPTS} runs")


def test_characters_that_crash_the_raw_parser_are_read_safely() -> None:
    result = _hostile_child_run()
    # The same layout kills an unguarded parse: the test exercises the real crash.
    assert result["raw_signal"] == 11
    segments = result["segments"]
    assert isinstance(segments, dict)
    for command, found in segments.items():
        if command.startswith("x "):
            assert "rm -rf /nonexistent-x" in found, (command, found)
        elif command.startswith("echo"):
            assert found == [command], (command, found)


@pytest.mark.sqlite_only("the crash is in parsing the command; the registry plays no part")
def test_dry_run_survives_characters_that_crash_the_raw_parser(
    tmp_path: Path, database: ServerDatabase
) -> None:
    table = CtypeTable.of_this_process()
    if table is None:
        pytest.skip("this process's ctype table is not in a mapped file")
    for attempt in range(LAYOUT_ATTEMPTS):
        env = server_env(tmp_path / str(attempt), database)
        with server_process(env, tmp_path / f"server-{attempt}.log") as live:
            unmapped = table.unmapped_lookups(live.process.pid)
            if not unmapped:
                continue
            step = max(1, len(unmapped) // 24)
            with live.client() as client:
                for code_point in unmapped[::step]:
                    command = f"echo {{{chr(code_point)}"
                    response = client.post("/v1/policy/evaluate", json={"command": command})
                    assert response.status_code == 200, (hex(code_point), response.text)
                    assert response.json()["segments"] == [command]
            assert live.process.poll() is None, live.log()
            return
    pytest.skip(f"no server layout with a hole past the ctype table in {LAYOUT_ATTEMPTS} runs")


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("echo {\U00031860}", "echo {____}"),
        ("{1..\u4e2d}", "{1..___}"),
        ("{12\u3000x", "{12___x"),
        ("{\ud800", "{___"),  # a lone surrogate, as JSON can carry one
        ("{\u00e9} {1.\U00031860} \U00031860{", None),  # Latin-1, a single dot, no brace: kept
    ],
)
def test_masking_keeps_every_byte_offset(text: str, masked: str | None) -> None:
    source = text.encode("utf-8", "surrogatepass")
    safe = _scanner_safe(text)
    assert len(safe) == len(source)
    assert safe == (source if masked is None else masked.encode())


def test_masked_characters_stay_in_the_segments() -> None:
    reading = read_command("echo {\U00031860} && rm -rf /nonexistent-\u4e2d{\u4e2d")
    assert "echo {\U00031860}" in reading.segments
    assert "rm -rf /nonexistent-\u4e2d{\u4e2d" in reading.segments


# --- fuzzing the reader as the server runs it: the event loop thread and worker threads ------

_ANY_CHARACTER = st.characters(codec=None, blacklist_categories=())
_SHELL_PIECES = st.sampled_from(
    [
        "{",
        "}",
        "$(",
        ")",
        "((",
        "))",
        "`",
        "<<EOF\n",
        "\nEOF\n",
        "<<-'X'\n",
        "${",
        "[[",
        "]]",
        "'",
        '"',
        "\\",
        "\x00",
        "\r",
        "\n",
        ";",
        "&",
        "|",
        "..",
        "1",
        " ",
        "\t",
        "\u3000",
        "\U00031860",
        "\ud800",
        "\udfff",
        "\u00ff",
        "bash -c ",
        "eval ",
    ]
)
_SHELL_TEXT = st.lists(
    st.one_of(_SHELL_PIECES, st.text(_ANY_CHARACTER, max_size=8)), max_size=40
).map("".join)
_NESTED = st.builds(
    lambda opener, closer, depth, middle: opener * depth + middle + closer * depth,
    st.sampled_from(["$(", "((", "{ ", "`", "$((", "<(", "bash -c '"]),
    st.sampled_from([")", "))", "; }", "`", ""]),
    st.integers(0, 400),
    st.sampled_from(["ls", "{\U00031860", "", "rm -rf /nonexistent-x"]),
)


def _read_everywhere(pool: ThreadPoolExecutor, commands: list[str]) -> None:
    """Read each command on this thread and on several workers at once, as the server does
    (short commands on the event loop, long ones in anyio's worker threads)."""
    futures = [pool.submit(read_command, command) for command in commands for _ in range(3)]
    here = [read_command(command) for command in commands]
    there = [future.result(timeout=60) for future in futures]
    for index, reading in enumerate(here):
        assert all(other == reading for other in there[3 * index : 3 * index + 3])


@pytest.fixture(scope="module")
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="fuzz-reader") as executor:
        yield executor


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(commands=st.lists(st.one_of(_SHELL_TEXT, _NESTED), min_size=1, max_size=4))
def test_fuzzed_text_read_concurrently_never_crashes(
    pool: ThreadPoolExecutor, commands: list[str]
) -> None:
    _read_everywhere(pool, commands)


def test_megabyte_inputs_are_read_or_refused_on_a_worker_thread(pool: ThreadPoolExecutor) -> None:
    megabyte = 1 << 20
    expected_limits = {
        "$(" * (megabyte // 4) + ")" * (megabyte // 4): "command nesting is too deep",
        "cat <<EOF\n" + "x $(y)\n" * (megabyte // 8) + "EOF\n": "more than 20000 commands",
        "\x00\x01\x7f" * (megabyte // 3): "command longer than 1000000 characters",
        ("echo {\U00031860 " * (megabyte // 8))[:900_000]: None,
    }
    readings = {command: pool.submit(read_command, command) for command in expected_limits}
    for command, reading in readings.items():
        assert reading.result(timeout=120).limit_reached == expected_limits[command]


def test_parsers_are_per_thread() -> None:
    from app.policy.shell.tree import _parser

    seen: list[object] = []
    thread = threading.Thread(target=lambda: seen.append(_parser()))
    thread.start()
    thread.join()
    assert seen and seen[0] is not _parser()
