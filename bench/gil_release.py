"""What a call that gives up the interpreter lock costs the event loop's thread when other
threads are busy (RELIABILITY.md "Soak"): each such call on the loop may wait a switch interval
to get the lock back. Prints median and p99 of each call with 0 and N busy Python threads.

    .venv/bin/python -m bench.gil_release [--busy 3] [--calls 200]
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path


def _calls(directory: Path) -> dict[str, Callable[[], object]]:
    ids = random.Random(os.urandom(32))
    existing = directory / "existing"
    existing.mkdir()
    return {
        "uuid4().hex (os.urandom: releases)": lambda: uuid.uuid4().hex,
        "Random.getrandbits(128) (holds)": lambda: ids.getrandbits(128),
        "os.path.isdir (stat: releases)": lambda: os.path.isdir(directory),
        "Path.mkdir(exist_ok=True) (releases)": lambda: existing.mkdir(exist_ok=True),
    }


def _timings(call: Callable[[], object], count: int) -> tuple[float, float]:
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    samples.sort()
    return samples[len(samples) // 2] * 1000, samples[int(len(samples) * 0.99) - 1] * 1000


def _spin(stop: threading.Event) -> None:
    spins = 0
    while not stop.is_set():
        spins += 1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--busy", type=int, default=3)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        calls = _calls(Path(scratch))
        for busy_count in (0, args.busy):
            stop = threading.Event()

            threads = [threading.Thread(target=_spin, args=(stop,)) for _ in range(busy_count)]
            for thread in threads:
                thread.start()
            try:
                for name, call in calls.items():
                    median, p99 = _timings(call, args.calls)
                    print(f"{busy_count} busy: {name}: median {median:.3f} ms, p99 {p99:.3f} ms")
            finally:
                stop.set()
                for thread in threads:
                    thread.join()


if __name__ == "__main__":
    main()
