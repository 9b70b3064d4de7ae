"""The pure parts of the streaming runner (app/sessions/runner.py): the checks and their order, the
tool object, and how output becomes NDJSON items (docs/streaming.md#the-ndjson-runner)."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.errors import InvalidRequestError, PolicyDeniedError
from app.output.artifact_log import OutputStream
from app.policy.critical_patterns import RUNNER_CRITICAL_PATTERNS
from app.sessions.runner import (
    ITEM_BYTES,
    ItemEncoder,
    check_run,
    ndjson_line,
    runner_tool,
    status_item,
)

DEFAULT = 600_000
RAISE_ONLY = (
    "timeout_ms must be strictly greater than the configured timeout (600000 ms); "
    "the per-call argument can only raise the timeout, never lower it"
)


def joined(items: list[dict[str, object]], stream: str) -> bytes:
    data = b""
    for item in items:
        text = str(item[stream])
        data += base64.b64decode(text) if item.get("encoding") == "base64" else text.encode()
    return data


# --- checks -----------------------------------------------------------------------------------


@pytest.mark.parametrize("timeout_ms", [0, DEFAULT, DEFAULT - 1, -5])
def test_raise_only_check_rejects_values_at_or_below_the_default(timeout_ms: int) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        check_run("echo hi", timeout_ms, DEFAULT)
    assert caught.value.message == RAISE_ONLY


def test_raise_only_check_accepts_default_plus_one_and_absent() -> None:
    assert check_run("echo hi", DEFAULT + 1, DEFAULT) == DEFAULT + 1
    assert check_run("echo hi", None, DEFAULT) == DEFAULT


def test_raise_only_check_comes_before_the_absolute_and_pattern_checks() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        check_run("/bin/rm -rf /x", 0, DEFAULT)
    assert "strictly greater" in caught.value.message
    with pytest.raises(InvalidRequestError) as absolute:
        check_run("/bin/rm -rf /x", None, DEFAULT)
    assert absolute.value.message == "absolute command not allowed, use relative path"


@pytest.mark.parametrize("command", ["/bin/echo hi", "/"])
def test_a_leading_slash_is_an_absolute_command(command: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        check_run(command, None, DEFAULT)
    assert caught.value.message == "absolute command not allowed, use relative path"


@pytest.mark.parametrize("command", [" /bin/echo hi", "ls /etc", "~/bin/x", "cd / && ls"])
def test_only_the_first_character_makes_a_command_absolute(command: str) -> None:
    assert check_run(command, None, DEFAULT) == DEFAULT


def test_a_critical_pattern_names_its_regex_source() -> None:
    with pytest.raises(PolicyDeniedError) as caught:
        check_run("rm -rf /nonexistent-x", None, DEFAULT)
    source = RUNNER_CRITICAL_PATTERNS[0][0]
    assert caught.value.message == f"Pattern match found: {source}"
    assert caught.value.details == {"pattern": source}


def test_a_per_call_timeout_beyond_a_day_is_refused() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        check_run("echo hi", 10**12, DEFAULT)
    assert "at most 86400000" in caught.value.message


# --- the tool object --------------------------------------------------------------------------


def test_tool_description_states_the_default_timeout() -> None:
    tool = runner_tool(DEFAULT)
    assert tool["name"] == "bash_run"
    assert "default timeout is 600000 milliseconds (10 minutes)" in tool["description"]
    assert "strictly greater than 600000" in tool["description"]
    schema = tool["inputSchema"]
    assert schema["type"] == "object"
    assert schema["properties"]["command"]["type"] == "string"
    assert schema["properties"]["timeout_ms"]["type"] == "integer"
    assert schema["required"] == ["command"]


def test_tool_rebuilt_for_another_timeout_has_no_stale_value() -> None:
    text = json.dumps(runner_tool(1_800_000))
    assert "600000" not in text
    assert "default timeout is 1800000 milliseconds (30 minutes)" in text
    assert "strictly greater than 1800000" in text


# --- items ------------------------------------------------------------------------------------


def test_output_is_cut_into_items_of_at_most_4096_bytes() -> None:
    data = b"a" * (2 * ITEM_BYTES + 100)
    items = ItemEncoder().feed(OutputStream.stdout, data)
    assert [len(str(item["stdout"])) for item in items] == [ITEM_BYTES, ITEM_BYTES, 100]
    # "The read filled the buffer": more may follow.
    assert [item["truncated"] for item in items] == [True, True, False]
    assert joined(items, "stdout") == data


def test_data_items_carry_one_stream_and_no_status() -> None:
    encoder = ItemEncoder()
    items = encoder.feed(OutputStream.stdout, b"out\n") + encoder.feed(OutputStream.stderr, b"e\n")
    assert items == [
        {"stdout": "out\n", "stderr": "", "exit_code": None, "signal": None, "truncated": False},
        {"stdout": "", "stderr": "e\n", "exit_code": None, "signal": None, "truncated": False},
    ]


def test_pty_output_goes_to_stdout() -> None:
    items = ItemEncoder().feed(OutputStream.pty, b"hi\r\n")
    assert items[0]["stdout"] == "hi\r\n"
    assert items[0]["stderr"] == ""


def test_a_character_split_across_reads_is_held_until_it_is_complete() -> None:
    encoder = ItemEncoder()
    euro = "€".encode()
    first = encoder.feed(OutputStream.stdout, b"price " + euro[:2])
    assert first == [
        {"stdout": "price ", "stderr": "", "exit_code": None, "signal": None, "truncated": False}
    ]
    second = encoder.feed(OutputStream.stdout, euro[2:] + b"5\n")
    assert second[0]["stdout"] == "€5\n"
    assert "encoding" not in second[0]


def test_a_character_cut_by_the_item_size_moves_to_the_next_item() -> None:
    data = b"a" * (ITEM_BYTES - 1) + "é".encode() + b"z"
    items = ItemEncoder().feed(OutputStream.stdout, data)
    assert [item.get("encoding") for item in items] == [None, None]
    assert items[0]["stdout"] == "a" * (ITEM_BYTES - 1)
    assert items[0]["truncated"] is True
    assert items[1]["stdout"] == "éz"


def test_held_bytes_of_one_stream_do_not_block_the_other() -> None:
    encoder = ItemEncoder()
    assert encoder.feed(OutputStream.stdout, "€".encode()[:1]) == []
    items = encoder.feed(OutputStream.stderr, b"err")
    assert items[0]["stderr"] == "err"


def test_invalid_utf8_is_sent_as_base64() -> None:
    items = ItemEncoder().feed(OutputStream.stdout, b"\xff\xfebin")
    assert items == [
        {
            "stdout": base64.b64encode(b"\xff\xfebin").decode(),
            "stderr": "",
            "exit_code": None,
            "signal": None,
            "truncated": False,
            "encoding": "base64",
        }
    ]


def test_an_unfinished_character_at_the_end_is_flushed_as_base64() -> None:
    encoder = ItemEncoder()
    assert encoder.feed(OutputStream.stderr, b"x\xe2\x82") == [
        {"stdout": "", "stderr": "x", "exit_code": None, "signal": None, "truncated": False}
    ]
    flushed = encoder.flush()
    assert flushed[0]["encoding"] == "base64"
    assert base64.b64decode(str(flushed[0]["stderr"])) == b"\xe2\x82"
    assert encoder.flush() == []


@given(st.lists(st.binary(max_size=9000), max_size=6), st.booleans())
def test_items_reassemble_the_exact_bytes_of_each_stream(
    chunks: list[bytes], to_stderr: bool
) -> None:
    stream = OutputStream.stderr if to_stderr else OutputStream.stdout
    name = "stderr" if to_stderr else "stdout"
    encoder = ItemEncoder()
    items = [item for chunk in chunks for item in encoder.feed(stream, chunk)] + encoder.flush()
    assert joined(items, name) == b"".join(chunks)
    for item in items:
        raw = str(item[name])
        size = len(base64.b64decode(raw)) if item.get("encoding") else len(raw.encode())
        assert 0 < size <= ITEM_BYTES
        assert item["stdout" if to_stderr else "stderr"] == ""


def test_status_items() -> None:
    assert status_item(exit_code=42, signal=None, timed_out=False) == {
        "stdout": "",
        "stderr": "",
        "exit_code": 42,
        "signal": None,
        "truncated": False,
    }
    # The registry records a signal death bash-style (128+N); the runner reports the signal.
    assert status_item(exit_code=137, signal=9, timed_out=False)["exit_code"] is None
    assert status_item(exit_code=137, signal=9, timed_out=False)["signal"] == 9
    timed_out = status_item(exit_code=None, signal=15, timed_out=True)
    assert (timed_out["exit_code"], timed_out["signal"]) == (None, -1)


def test_ndjson_lines_are_one_compact_json_object_each() -> None:
    line = ndjson_line({"stdout": "a\nb", "stderr": ""})
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert json.loads(line) == {"stdout": "a\nb", "stderr": ""}


def test_ndjson_lines_stay_one_line_for_splitlines() -> None:
    # NEL, U+2028 and U+2029 are line breaks to str.splitlines() (and httpx's iter_lines()).
    item = {"stdout": "a\x85b\u2028c\u2029d\r\n€", "stderr": ""}
    line = ndjson_line(item)
    assert len(line.decode().splitlines()) == 1
    assert json.loads(line) == item
