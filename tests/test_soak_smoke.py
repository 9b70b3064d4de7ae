"""A few seconds of `bench/soak.py` (the soak itself is a benchmark, not part of the suite): mixed
foreground, job, PTY and streaming work with binary output and a stalled viewer, every log
checked against the sha256 its command printed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_a_short_soak_loses_no_byte_gets_no_5xx_and_gives_back_its_descriptors() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench.soak", "--seconds", "6", "--clients", "6", "--warm-up", "3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    report = json.loads(result.stdout)
    assert report["failures"] == []
    assert report["checks"]["no_5xx_or_transport_error"], report["statuses"]
    assert report["checks"]["fds_back_to_baseline"], (report["baseline"], report["after"])
    assert set(report["runs"]) == {
        "foreground",
        "foreground_text",
        "job",
        "pty",
        "viewer",
        "stalled_viewer",
    }
