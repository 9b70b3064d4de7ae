"""Writes the sync client (sdk/shellgate/sync_{client,feeds,files,stream}.py) from the async one
(async_*.py), so that a change is made once: `unasync` (python-trio) drops `async` and `await`
and renames tokens by the table below, then ruff sorts the imports and formats the result.
The generated files are committed (the SDK does not need unasync to run); `--check` (called by
`make lint`, and tests/sdk/test_sync_is_generated.py) fails when they differ from what this
writes. What cannot be renamed token by token lives in two small hand-written modules,
async_primitives.py and sync_primitives.py.

    python sdk/generate_sync.py            # rewrite the sync modules
    python sdk/generate_sync.py --check    # exit 1 and name the modules that are stale
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import unasync

PACKAGE = Path(__file__).resolve().parent / "shellgate"
# async_<name>.py → sync_<name>.py. Not async_primitives.py: it and sync_primitives.py are the
# differences between the flavours, written by hand.
GENERATED = ("client", "feeds", "files", "stream")

# Besides unasync's own (`__aenter__` → `__enter__`, `AsyncIterator` → `Iterator`, and any
# `AsyncX` class → `SyncX`: AsyncFiles, AsyncFeeds).
REPLACEMENTS = {
    # The SDK's own names. `AsyncClient` also turns `httpx.AsyncClient` into `httpx.Client`.
    "AsyncClient": "Client",
    "AsyncAttachment": "Attachment",
    **{f"async_{name}": f"sync_{name}" for name in (*GENERATED, "primitives")},
    # httpx
    "AsyncBaseTransport": "BaseTransport",
    "aclose": "close",
    "aread": "read",
    "aiter_bytes": "iter_bytes",
    "aiter_lines": "iter_lines",
    # httpx-sse
    "aconnect_sse": "connect_sse",
    "aiter_sse": "iter_sse",
    # websockets: `websockets.asyncio.client` → `websockets.sync.client`. The async modules
    # never name `asyncio` otherwise (they sleep and lock through async_primitives).
    "asyncio": "sync",
}

HEADER = (
    "# Generated from {source} by sdk/generate_sync.py: do not edit. Change {source},\n"
    "# then run `make sync-sdk`.\n"
)


def generated_sources(package: Path = PACKAGE) -> dict[str, str]:
    """Each sync module's file name and the text this generator makes for it."""
    with tempfile.TemporaryDirectory() as scratch:
        # unasync maps a directory to another; the flavours here share one package, so each
        # async module is staged alone, under a name of its own.
        staged = Path(scratch, "shellgate_async")
        staged.mkdir()
        for name in GENERATED:
            shutil.copy(package / f"async_{name}.py", staged / f"{name}.py")
        rule = unasync.Rule(
            "/shellgate_async/", "/shellgate_sync/", additional_replacements=REPLACEMENTS
        )
        unasync.unasync_files([str(staged / f"{name}.py") for name in GENERATED], [rule])
        raw = {
            name: Path(scratch, "shellgate_sync", f"{name}.py").read_text(encoding="utf-8")
            for name in GENERATED
        }
    return {
        f"sync_{name}.py": _tidied(
            HEADER.format(source=f"async_{name}.py") + text, package / f"sync_{name}.py"
        )
        for name, text in raw.items()
    }


def _tidied(source: str, target: Path) -> str:
    """Imports sorted again (renamed modules sort elsewhere), `for x in y: yield x` as the
    `yield from` it is without `async`, and formatted: with the repository's ruff settings,
    as `make lint` checks them."""
    ruff = [sys.executable, "-m", "ruff"]
    fixed = _run(
        [*ruff, "check", "--fix-only", "--unsafe-fixes", "--select", "I,UP028"], source, target
    )
    return _run([*ruff, "format"], fixed, target)


def _run(command: list[str], source: str, target: Path) -> str:
    done = subprocess.run(
        [*command, "--stdin-filename", str(target), "-"],
        input=source,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed on {target.name}:\n{done.stderr}")
    return done.stdout


def stale_modules(package: Path = PACKAGE) -> list[str]:
    """The sync modules whose committed text is not what the generator writes."""
    stale = []
    for name, text in generated_sources(package).items():
        path = package / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            stale.append(name)
    return stale


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    parser.add_argument("--package", type=Path, default=PACKAGE, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.check:
        stale = stale_modules(options.package)
        for name in stale:
            source = name.replace("sync_", "async_", 1)
            print(f"{options.package / name} differs from what {source} generates")
        if stale:
            print("run `make sync-sdk` and commit the result", file=sys.stderr)
        return 1 if stale else 0
    for name, text in generated_sources(options.package).items():
        (options.package / name).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
