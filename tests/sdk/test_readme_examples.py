"""The README's SDK examples run as written against a real server (only the address and the
token are swapped in)."""

from __future__ import annotations

import contextlib
import io
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import AGENT, LiveServer

README = Path(__file__).resolve().parents[2] / "README.md"


def sdk_examples() -> list[str]:
    text = README.read_text("utf-8")
    section = text.split("## Python SDK", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.DOTALL)


def test_the_readme_has_a_sync_and_an_async_example() -> None:
    examples = sdk_examples()
    assert len(examples) == 2
    assert "Client(" in examples[0] and "AsyncClient" in examples[1]


@pytest.mark.parametrize("index", [0, 1])
def test_a_readme_example_runs(
    index: int, sdk_server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHELLGATE_URL", sdk_server.base_url)
    monkeypatch.setenv("SHELLGATE_TOKEN", AGENT)
    source = (
        sdk_examples()[index]
        .replace('"http://127.0.0.1:8000"', repr(sdk_server.base_url))
        .replace('open("data/admin.token").read().strip()', repr(AGENT))
    )
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(source, f"README example {index}", "exec"), {"__name__": "readme"})
    if index == 0:
        assert printed.getvalue().startswith("hello\nLinux\n")
        assert printed.getvalue().endswith("1\n2\n3\nend 0\n")
    else:
        assert printed.getvalue() == "['shard 0\\n', 'shard 1\\n', 'shard 2\\n']\n"


SDK_GUIDE = README.parent / "docs" / "sdk.md"


def guide_example(heading: str) -> str:
    section = SDK_GUIDE.read_text("utf-8").split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.DOTALL)[0]


def test_the_sdk_guides_attach_example_runs_to_its_end(sdk_server: LiveServer) -> None:
    # Copied as written it must end: a prompt that arrives in pieces must still be seen, and
    # the loop must not type into the interpreter forever.
    from shellgate import Client, OutputFrame

    printed = io.StringIO()
    with Client(sdk_server.base_url, AGENT) as client:
        scope = {"client": client, "OutputFrame": OutputFrame, "__name__": "guide"}
        source = guide_example("Driving a PTY: attach")
        with contextlib.redirect_stdout(printed), _alarm(30):
            exec(compile(source, "docs/sdk.md attach example", "exec"), scope)
    assert printed.getvalue() == "0\n"


@contextlib.contextmanager
def _alarm(seconds: int) -> Iterator[None]:
    """A hanging example fails the test instead of the run (SIGALRM: this is the main thread)."""

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"the example did not end within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
