"""Choosing the strongest backend the host gives at start."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from app.confinement.cgroups import (
    CgroupBackend,
    cgroup1_bases,
    cgroup2_base,
    instance_name,
    own_cgroups,
)
from app.confinement.units import Backend

BACKENDS = ("cgroup2", "cgroup1", "rlimit")


@dataclass
class Choice:
    backend: Backend
    reasons: list[str]  # why each stronger backend was not used


def choose_backend(data_dir: Path, wanted: str = "auto") -> Choice:
    """The strongest backend this host gives (or `wanted`; OSError when it is not available)."""
    root = os.geteuid() == 0
    instance = instance_name(data_dir)
    reasons: list[str] = []
    try:
        own = own_cgroups()
    except OSError as error:
        own = {}
        reasons.append(f"cannot read /proc/self/cgroup: {error}")
    for name in BACKENDS:
        if wanted not in ("auto", name):
            continue
        if name == "rlimit":
            return Choice(Backend(root=root), reasons)
        try:
            if name == "cgroup2":
                backend: Backend = CgroupBackend(
                    root=root, bases={"": cgroup2_base(instance, own)}, version=2
                )
            else:
                backend = CgroupBackend(root=root, bases=cgroup1_bases(instance, own), version=1)
        except OSError as error:
            reason = f"{name}: {error.strerror or error}" if error.strerror else f"{name}: {error}"
            if wanted == name:
                raise OSError(f"confinement {reason}") from error
            reasons.append(reason)
            continue
        return Choice(backend, reasons)
    raise OSError(f"unknown confinement backend {wanted!r}")
