"""The host environment a command inherits follows `os.environ` as it changes, although the
filtered copy is kept between calls (app/process/environment.py)."""

from __future__ import annotations

import pytest

from app.process.environment import host_environment


def test_a_change_to_the_process_environment_shows_in_the_next_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOST_ENV_PROBE", "one")
    assert host_environment()["HOST_ENV_PROBE"] == "one"
    monkeypatch.setenv("HOST_ENV_PROBE", "two")
    assert host_environment()["HOST_ENV_PROBE"] == "two"
    monkeypatch.delenv("HOST_ENV_PROBE")
    assert "HOST_ENV_PROBE" not in host_environment()


def test_the_servers_own_variables_and_shell_noise_are_left_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SHELLGATE_TOKENS", "a:agent:secret")
    monkeypatch.setenv("PS1", "$ ")
    env = host_environment()
    assert "SHELLGATE_TOKENS" not in env and "PS1" not in env


def test_each_call_gets_a_dict_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOST_ENV_PROBE", "kept")
    first = host_environment()
    first["HOST_ENV_PROBE"] = "changed by a caller"
    first["ADDED_BY_A_CALLER"] = "x"
    second = host_environment()
    assert second["HOST_ENV_PROBE"] == "kept" and "ADDED_BY_A_CALLER" not in second


def test_an_explicit_source_is_filtered_the_same_way() -> None:
    env = host_environment({"A": "1", "SHELLGATE_X": "2", "_": "3"})
    assert env == {"A": "1"}
