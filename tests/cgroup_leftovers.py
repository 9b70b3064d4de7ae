"""The cgroups of test servers that could not remove their own.

A server removes its `shellgate-<instance>` cgroups when it stops, and a restart on the same data
directory removes what a killed one left (app/confinement/cgroups.py). A test server killed on
purpose (the fault tests' SIGKILL) has no restart: each left its cgroups, with the units of its
standby shells, below the test process's own cgroups until the machine rebooted (a full suite
left ≈ 120). At the end of a session every data directory the session made is looked for there,
and what is found is removed the way a restart would: its units' processes (this session's
servers' own) killed, then the directories.
"""

from __future__ import annotations

import os
from pathlib import Path

from app.confinement.cgroups import CGROUP_ROOT, instance_name, own_cgroups
from app.confinement.choice import choose_backend


def own_cgroup_directories() -> list[Path]:
    """This process's cgroup directory in each hierarchy, where its servers make their bases."""
    try:
        own = own_cgroups()
    except OSError:
        return []
    return [
        (CGROUP_ROOT / controller if controller else CGROUP_ROOT) / path.lstrip("/")
        for controller, path in own.items()
    ]


def _instances_present() -> set[str]:
    """The `shellgate-*` cgroup names below this process's cgroups, in any hierarchy."""
    found: set[str] = set()
    for directory in own_cgroup_directories():
        try:
            found.update(
                entry.name
                for entry in os.scandir(directory)
                if entry.is_dir() and entry.name.startswith("shellgate-")
            )
        except OSError:
            continue
    return found


def remove_test_servers_cgroups(root: Path) -> list[str]:
    """Remove the cgroups of every server whose data directory lies under `root`; the names
    removed."""
    present = _instances_present()
    removed: list[str] = []
    if not present:
        return removed
    for directory, subdirectories, _ in os.walk(root):
        for name in subdirectories:
            data_dir = Path(directory, name)
            instance = instance_name(data_dir)
            if instance not in present:
                continue
            try:
                backend = choose_backend(data_dir).backend
            except OSError:
                continue
            backend.sweep_leftovers()
            backend.close()
            present.discard(instance)
            removed.append(instance)
    return removed
