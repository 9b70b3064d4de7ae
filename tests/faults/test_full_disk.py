"""A full data directory (a real, small tmpfs): the running command keeps what was written and
ends with `Output storage full`; new work is refused with 507 `storage_full`; readiness fails
until space returns; then everything works again without a restart. Never a 500."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.store.storage import OUTPUT_STORAGE_FULL_NOTICE
from tests.conftest import AGENT, make_settings, serve
from tests.databases import ServerDatabase
from tests.faults.tmpfs import small_tmpfs

DISK_MB = 24
FREE_FOR_THE_TEST_MB = 8


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "disk", DISK_MB) as mountpoint:
        yield mountpoint


def _fill(directory: Path, leave_mb: int) -> Path:
    """A filler file taking all but `leave_mb` of the disk."""
    stats = os.statvfs(directory)
    free = stats.f_bavail * stats.f_frsize
    filler = directory / "filler"
    with filler.open("wb") as file:
        os.posix_fallocate(file.fileno(), 0, free - leave_mb * 1024 * 1024)
    return filler


def test_a_full_data_directory_is_reported_never_a_500(
    small_disk: Path, tmp_path: Path, database: ServerDatabase
) -> None:
    settings = make_settings(tmp_path, database, data_dir=small_disk / "data")
    with serve(settings) as server, server.client(AGENT) as client:
        assert client.get("/readyz").status_code == 200  # also writes the reserve
        filler = _fill(small_disk, FREE_FOR_THE_TEST_MB)

        # 40 MB of output into ~8 MB of room: the log fills the disk mid-run.
        job = client.post(
            "/v1/executions",
            json={"command": "head -c 40000000 /dev/zero; exit 3", "async": True},
        ).json()
        record = client.get(f"/v1/executions/{job['id']}?wait=60").json()
        assert record["state"] == "failed", record
        assert record["exit_code"] == 3
        assert OUTPUT_STORAGE_FULL_NOTICE in record["notices"]
        assert OUTPUT_STORAGE_FULL_NOTICE in record["text"]
        kept = client.get(f"/v1/executions/{job['id']}/output", params={"limit": 16_000_000})
        assert kept.status_code == 200
        assert kept.headers["X-Complete"] == "true"
        assert 0 < len(kept.content) == record["total_bytes"] < 40_000_000
        assert kept.content == b"\0" * len(kept.content)  # an exact prefix
        print(f"kept {len(kept.content)} of 40000000 bytes")

        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["error"]["code"] == "storage_full"
        assert "Retry-After" in ready.headers
        refused = client.post("/v1/executions", json={"command": "echo never > never-ran"})
        assert refused.status_code == 507, refused.text
        assert refused.json()["error"]["code"] == "storage_full"
        assert int(refused.headers["Retry-After"]) > 0  # as documented (docs/api.md)
        assert not (settings.workspace / "never-ran").exists()

        # Space returns: ready again, and work runs, without a restart.
        filler.unlink()
        deadline = time.monotonic() + 10
        while client.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, "not ready after space returned"
            time.sleep(0.1)
        again = client.post("/v1/executions", json={"command": "echo back"})
        assert again.status_code == 200, again.text
        assert again.json()["output"] == "back\n"
