"""Run every benchmark (`make bench`): each `bench/bench_*.py` in its own process, in turn, so
that one benchmark's servers and threads never disturb another's measurements."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def main() -> int:
    failures = 0
    for script in sorted(Path(__file__).parent.glob("bench_*.py")):
        module = f"bench.{script.stem}"
        print(f"== {module}", flush=True)
        result = subprocess.run([sys.executable, "-m", module], timeout=900, check=False)
        failures += result.returncode != 0
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
