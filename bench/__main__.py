"""`make bench`: the side-by-side harness (`bench/sidebyside.py`)."""

from __future__ import annotations

import sys

from bench.sidebyside import main

if __name__ == "__main__":
    sys.exit(main())
