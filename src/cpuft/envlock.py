"""Identical nodes without an image: a lock of exact versions, a bootstrap script, a verifier.

No torch here: versions come from package metadata.
"""

from __future__ import annotations

import hashlib
import json
import platform
import shlex
from importlib import metadata
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from cpuft.errors import CpuftError

LOCK_VERSION = 1
# Debian/Ubuntu packages a node needs besides Python: the allocator cpuft preloads, numactl and
# iproute2 for placement and the network checks.
SYSTEM_PACKAGES = ("libgoogle-perftools4", "numactl", "iproute2")


def requirement_closure(root: str = "cpuft") -> dict[str, str]:
    """Every installed distribution ``root`` needs (recursively), with its exact version."""
    found: dict[str, str] = {}
    todo = [root]
    while todo:
        name = canonicalize_name(todo.pop())
        if name in found:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise CpuftError(f"{name} is required but not installed") from None
        found[name] = dist.version
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return dict(sorted(found.items()))


def lock_hash(python: str, packages: dict[str, str]) -> str:
    canonical = json.dumps({"python": python, "packages": packages}, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def make_lock() -> dict[str, Any]:
    packages = requirement_closure()
    python = platform.python_version()
    return {"lock_version": LOCK_VERSION, "python": python, "machine": platform.machine(),
            "packages": packages, "hash": lock_hash(python, packages)}


def read_lock(text: str, source: str = "lock file") -> dict[str, Any]:
    try:
        lock = json.loads(text)
        if lock.get("lock_version") != LOCK_VERSION or not isinstance(lock["packages"], dict):
            raise ValueError("not a cpuft lock")
        expected = lock_hash(lock["python"], lock["packages"])
    except (ValueError, KeyError, TypeError) as e:
        raise CpuftError(f"{source} is not a cpuft lock file ({e})") from None
    if lock.get("hash") != expected:
        raise CpuftError(f"{source}: its hash does not match its contents (edited by hand?)")
    return dict(lock)


def differences(lock: dict[str, Any], current: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(what, locked, here) for each mismatch; '' where a package is absent."""
    diffs = []
    if lock["python"] != current["python"]:
        diffs.append(("python", lock["python"], current["python"]))
    names = sorted(set(lock["packages"]) | set(current["packages"]))
    for name in names:
        want, have = lock["packages"].get(name, ""), current["packages"].get(name, "")
        if want != have:
            diffs.append((name, want, have))
    return diffs


def bootstrap_script(lock: dict[str, Any], prefix: str = "/opt/cpuft",
                     cpuft_source: str = "") -> str:
    """A POSIX shell script (also cloud-init user data) that makes a Debian/Ubuntu server match
    ``lock``, then verifies it with ``cpuft env verify``."""
    py = ".".join(lock["python"].split(".")[:2])
    packages = dict(lock["packages"])
    cpuft_spec = cpuft_source or f"cpuft=={packages.pop('cpuft', '')}"
    packages.pop("cpuft", None)
    torch = packages.pop("torch", None)
    pins = " ".join(shlex.quote(f"{n}=={v}") for n, v in packages.items())
    lock_json = json.dumps(lock, indent=2, sort_keys=True)
    count = len(lock["packages"])
    return f"""#!/bin/sh
# cpuft bootstrap for lock {lock['hash']} (Python {lock['python']}, {count} packages).
# Run as root on a fresh Debian or Ubuntu server, or pass as cloud-init user data.
# A torch version ending in +cpu comes from PyTorch's CPU wheel index: name it in
# PIP_EXTRA_INDEX_URL before running this.
set -eu
PREFIX=${{PREFIX:-{shlex.quote(prefix)}}}
PYTHON=${{PYTHON:-$PREFIX/bin/python}}

# 1. system packages
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q python{py} python{py}-venv {' '.join(SYSTEM_PACKAGES)}

# 2. a virtual environment with exactly the locked versions (torch first, by exact version)
[ -x "$PREFIX/bin/python" ] || python{py} -m venv "$PREFIX"
"$PREFIX/bin/pip" install -q {shlex.quote(f"torch=={torch}") if torch else ""}
"$PREFIX/bin/pip" install -q --no-deps {pins}
"$PREFIX/bin/pip" install -q --no-deps {shlex.quote(cpuft_spec)}

# 3. verify: every version must match the lock, or this script fails
cat > "$PREFIX/cpuft.lock" <<'CPUFT_LOCK'
{lock_json}
CPUFT_LOCK
"$PYTHON" -m cpuft env verify --lock "$PREFIX/cpuft.lock"
"""
