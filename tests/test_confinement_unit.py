"""The parts of app/confinement/ that need no server: limits within the server's, the
server's own cgroups, the instance name, and the evidence of rlimit hits."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from app.confinement import Limits, Unit, instance_name, own_cgroups, resolve_limits
from app.confinement.cgroups import _pids_in
from app.errors import InvalidRequestError
from app.process import ChildConfinement, ExitStatus

CEILING = Limits(memory_mb=1000, processes=512, cpu_seconds=None, file_size_mb=None, open_files=64)


def test_an_absent_limit_takes_the_server_one() -> None:
    assert resolve_limits(None, CEILING) == CEILING


def test_a_lower_limit_wins_and_an_unlimited_one_takes_any_value() -> None:
    limits = resolve_limits({"memory_mb": 100, "cpu_seconds": 5}, CEILING)
    assert (limits.memory_mb, limits.cpu_seconds, limits.processes) == (100, 5, 512)


def test_a_higher_limit_is_refused_with_the_allowed_value() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        resolve_limits({"processes": 513}, CEILING)
    assert caught.value.message == "limits.processes of 513 is above the server's limit of 512"


def test_own_cgroups_reads_v1_and_unified_lines() -> None:
    text = "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/abc\n2:cpu,cpuacct:/x\n0::/\n"
    found = own_cgroups(text)
    assert found["pids"] == "/"
    assert found["memory"] == "/process_api/abc"
    assert found["cpu"] == found["cpuacct"] == "/x"
    assert found[""] == "/"


def test_the_instance_name_follows_the_data_dir(tmp_path: Path) -> None:
    assert instance_name(tmp_path / "a") == instance_name(tmp_path / "a")
    assert instance_name(tmp_path / "a") != instance_name(tmp_path / "b")
    assert instance_name(tmp_path / "a").startswith("shellgate-")


@pytest.mark.parametrize(
    ("status", "notice"),
    [
        (ExitStatus(exit_code=152, signal=signal.SIGXCPU), "CPU time limit of 2 s reached"),
        (ExitStatus(exit_code=152, signal=None), "CPU time limit of 2 s reached"),
        (ExitStatus(exit_code=153, signal=None), "File size limit of 10 MB reached"),
        (ExitStatus(exit_code=1, signal=None), None),
    ],
)
def test_rlimit_evidence_is_the_signal_of_the_limit(status: ExitStatus, notice: str | None) -> None:
    unit = Unit("ex_x", Limits(cpu_seconds=2, file_size_mb=10), ChildConfinement())
    assert unit.evidence(status, lambda: "") == notice


def test_a_failed_allocation_reads_as_the_memory_limit_only_when_the_run_failed() -> None:
    unit = Unit("ex_x", Limits(memory_mb=100), ChildConfinement())
    assert (
        unit.evidence(ExitStatus(1, None), lambda: "MemoryError")
        == "Memory limit of 100 MB reached"
    )
    assert unit.evidence(ExitStatus(0, None), lambda: "MemoryError") is None
    assert (
        Unit("ex_x", Limits(), ChildConfinement()).evidence(
            ExitStatus(1, None), lambda: "MemoryError"
        )
        is None
    )


def test_a_cgroup_file_is_read_to_its_end_however_long(tmp_path: Path) -> None:
    # `cgroup.procs` of a large tree outgrows one read: a pid missed is a process not killed.
    pids = list(range(100_000, 130_000))  # ~210 KB of text
    (tmp_path / "cgroup.procs").write_text("".join(f"{pid}\n" for pid in pids))
    assert _pids_in(tmp_path) == pids


def test_the_output_tail_is_only_built_when_it_can_decide() -> None:
    """Building it means building the run's inline window: not for every run's end."""

    def not_needed() -> str:
        raise AssertionError("the output tail was built for nothing")

    assert (
        Unit("ex_x", Limits(memory_mb=100), ChildConfinement()).evidence(
            ExitStatus(0, None), not_needed
        )
        is None
    )
    assert (
        Unit("ex_x", Limits(), ChildConfinement()).evidence(ExitStatus(1, None), not_needed) is None
    )
