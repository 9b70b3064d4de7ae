"""The parts of app/confinement/ that need no server: limits within the server's, the
server's own cgroups, the instance name, the evidence of rlimit hits, and a cgroup backend
whose base cgroups were removed from outside (on the cgroup hierarchies this machine has)."""

from __future__ import annotations

import functools
import logging
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.confinement import (
    Limits,
    Unit,
    build_confinement,
    choose_backend,
    instance_name,
    own_cgroups,
    resolve_limits,
)
from app.confinement.cgroups import CgroupBackend, _pids_in
from app.confinement.shared_ceiling import (
    SharedCeiling,
    default_total_memory_mb,
    default_total_processes,
    server_memory_ceiling_mb,
    server_process_ceiling,
)
from app.core.errors import InvalidRequestError
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
        (ExitStatus(152, None, passed_on=True), "CPU time limit of 2 s reached"),
        (ExitStatus(exit_code=153, signal=signal.SIGXFSZ), "File size limit of 10 MB reached"),
        (ExitStatus(153, None, passed_on=True), "File size limit of 10 MB reached"),
        # The command's own `exit 152` / `exit 153`: bash would have reported a death.
        (ExitStatus(exit_code=152, signal=None), None),
        (ExitStatus(exit_code=153, signal=None), None),
        (ExitStatus(1, None, passed_on=True), None),
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


@pytest.fixture(params=["cgroup2", "cgroup1"])
def cgroup_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CgroupBackend]:
    """A real backend as a server of `tmp_path` makes it at start (its own instance, so its
    bases are its own); skipped where the hierarchy is not usable here."""
    try:
        backend = choose_backend(tmp_path, request.param).backend
    except OSError as error:
        pytest.skip(f"{request.param} is not available on this machine: {error}")
    assert isinstance(backend, CgroupBackend)
    yield backend
    backend.close()


def test_a_unit_opens_after_its_base_cgroups_were_removed_from_outside(
    cgroup_backend: CgroupBackend, caplog: pytest.LogCaptureFixture
) -> None:
    for base in cgroup_backend.bases.values():
        base.rmdir()  # what an operator's cleanup of empty cgroups does
    caplog.set_level(logging.WARNING, logger="shellgate.confinement")
    unit = cgroup_backend.open_unit("ex_rebased", Limits(processes=20))
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        for controller, base in cgroup_backend.bases.items():
            assert Path(unit.directories[controller]) == base / "ex_rebased"
            assert Path(unit.directories[controller]).is_dir()
        if cgroup_backend.version == 2:
            enabled = (cgroup_backend.bases[""] / "cgroup.subtree_control").read_text().split()
            assert {"memory", "pids"} <= set(enabled)
        pids = Path(unit.directories.get("pids") or unit.directories[""])
        assert (pids / "pids.max").read_text().strip() == "20"
        # A process can join the re-created hierarchy, so the unit confines and kills it.
        for procs in unit.child.cgroup_procs:
            Path(procs).write_text(str(sleeper.pid))
        assert unit.members() == {sleeper.pid}
    finally:
        released = unit.release(kill=True)
        sleeper.kill()
        sleeper.wait(timeout=10)
    assert released
    assert sleeper.returncode == -signal.SIGKILL
    assert not any(Path(directory).exists() for directory in unit.directories.values())
    assert all(base.is_dir() for base in cgroup_backend.bases.values())
    rebuilt = [r.getMessage() for r in caplog.records if "removed from outside" in r.getMessage()]
    assert len(rebuilt) == len(cgroup_backend.bases), rebuilt


def test_a_base_made_again_keeps_the_limits_of_all_commands_together(
    cgroup_backend: CgroupBackend,
) -> None:
    shared = cgroup_backend.limit_together(processes=300, memory_mb=700)
    pids_base = cgroup_backend.bases.get("pids") or cgroup_backend.bases[""]
    memory_base = cgroup_backend.bases.get("memory") or cgroup_backend.bases[""]
    memory_file = "memory.max" if cgroup_backend.version == 2 else "memory.limit_in_bytes"
    for _ in range(2):  # as written at start, then again in a base made again
        assert (pids_base / "pids.max").read_text().strip() == "300"
        assert (memory_base / memory_file).read_text().strip() == str(700 << 20)
        for base in cgroup_backend.bases.values():
            base.rmdir()
        unit = cgroup_backend.open_unit("ex_rebased", Limits(processes=20))
        assert unit.release(kill=True)
    assert (shared.processes, shared.memory_mb) == (300, 700)


def _cgroup_tree(root: Path, values: dict[str, str]) -> Path:
    """A directory tree standing for a hierarchy: `values` maps `a/b/file` to its content."""
    (root / "cgroup.procs").parent.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.procs").write_text("")
    for name, content in values.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(content)
    return root


def test_the_servers_ceilings_are_the_tightest_of_its_cgroup_and_those_above(
    tmp_path: Path,
) -> None:
    mount = _cgroup_tree(
        tmp_path / "pids",
        {"system/pids.max": "4915\n", "system/app/pids.max": "max\n", "system/app/own/x": ""},
    )
    ceiling = server_process_ceiling(mount / "system" / "app" / "own", mount)
    assert ceiling == min(4915, *_kernel_pid_limits())
    assert server_process_ceiling(None, None) == min(_kernel_pid_limits())
    memory = _cgroup_tree(
        tmp_path / "memory",
        {
            "a/memory.limit_in_bytes": str(2048 << 20),
            "a/b/memory.limit_in_bytes": "9223372036854771712",  # v1's "none"
        },
    )
    assert server_memory_ceiling_mb(memory / "a" / "b", memory, 1, host_mb=24000) == 2048
    assert server_memory_ceiling_mb(memory / "a" / "b", memory, 1, host_mb=1000) == 1000
    # The reserve: an eighth, at least 256 processes or 256 MB, at most half.
    assert default_total_processes(32768) == 32768 - 4096
    assert default_total_processes(1024) == 1024 - 256
    assert default_total_processes(160) == 80
    assert default_total_memory_mb(24000) == 21000
    assert default_total_memory_mb(1024) == 768
    assert default_total_memory_mb(0) is None


def test_a_total_above_the_servers_own_ceiling_is_kept_and_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="shellgate.confinement")
    confinement = build_confinement(
        tmp_path,
        "auto",
        memory_mb=None,
        processes=512,
        cpu_seconds=0,
        file_size_mb=0,
        open_files=0,
        total_processes=4_000_000,
    )
    try:
        if not isinstance(confinement.backend, CgroupBackend):
            pytest.skip("no cgroup backend here: no shared limits")
        assert confinement.totals.processes == 4_000_000
        warned = [
            r.getMessage() for r in caplog.records if "SHELLGATE_LIMIT_TOTAL_PROC" in r.getMessage()
        ]
        assert warned == [
            f"SHELLGATE_LIMIT_TOTAL_PROCESSES (4000000) is above what the server's own cgroup and "
            f"the host allow it ({min(_kernel_pid_limits())}): the commands can take what the "
            "server needs before they meet it"
        ]
    finally:
        confinement.close()


@pytest.mark.parametrize(
    ("totals", "refused"),
    [
        ({"total_processes": 100}, "SHELLGATE_LIMIT_TOTAL_PROCESSES needs"),
        ({"total_memory_mb": 500}, "SHELLGATE_LIMIT_TOTAL_MEMORY_MB needs"),
        (
            {"total_processes": 100, "total_memory_mb": 500},
            "SHELLGATE_LIMIT_TOTAL_PROCESSES and SHELLGATE_LIMIT_TOTAL_MEMORY_MB need",
        ),
        ({"total_processes": 0, "total_memory_mb": 0}, None),
        ({}, None),
    ],
)
def test_a_total_the_operator_set_fails_a_start_without_cgroups(
    tmp_path: Path, totals: dict[str, int], refused: str | None
) -> None:
    """Only a cgroup folder holds all commands: under `rlimit` a set total cannot hold, and the
    start fails saying so rather than run without it; a derived or disabled one is no error."""
    build = functools.partial(
        build_confinement,
        tmp_path,
        "rlimit",
        memory_mb=None,
        processes=512,
        cpu_seconds=0,
        file_size_mb=0,
        open_files=0,
        **totals,
    )
    if refused is None:
        confinement = build()
        assert confinement.totals == Limits()
        confinement.close()
        return
    with pytest.raises(OSError, match=refused + r" a cgroup backend .* confinement is rlimit"):
        build()


@pytest.mark.parametrize("set_by_the_operator", [False, True])
def test_a_total_the_kernel_will_not_take_fails_the_start_only_when_it_was_set(
    tmp_path: Path, set_by_the_operator: bool
) -> None:
    """A base whose limit file cannot be written (here: none there) leaves a derived total off,
    reported as none; a total the operator set makes it an error naming the setting."""
    shared = SharedCeiling({"pids": str(tmp_path / "absent")}, 1, processes=100, memory_mb=None)
    required = ["SHELLGATE_LIMIT_TOTAL_PROCESSES"] if set_by_the_operator else []
    if set_by_the_operator:
        with pytest.raises(OSError, match="SHELLGATE_LIMIT_TOTAL_PROCESSES is set but cannot be"):
            shared.apply(required=required)
    else:
        shared.apply(required=required)
        assert shared.processes is None


def _kernel_pid_limits() -> list[int]:
    return [
        int(Path(f"/proc/sys/kernel/{name}").read_text()) for name in ("pid_max", "threads-max")
    ]


def test_a_base_that_cannot_be_re_created_fails_the_unit_with_a_clear_error(
    tmp_path: Path,
) -> None:
    # Its parent (the server's own cgroup, here a plain directory) is gone: nothing above
    # the base is ever created, so the unit fails, with a reason a caller can show.
    base = tmp_path / "gone" / "shellgate-x"
    backend = CgroupBackend(root=True, bases={"pids": base}, version=1)
    with pytest.raises(OSError) as refused:
        backend.open_unit("ex_x", Limits())
    assert refused.value.strerror == (
        f"the server's cgroup {base} is gone and could not be re-created: No such file or directory"
    )
    assert not (tmp_path / "gone").exists()
