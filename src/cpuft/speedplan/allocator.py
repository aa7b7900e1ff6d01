"""Which allocator to preload (tcmalloc, else jemalloc), and the environment that preloads it."""

from __future__ import annotations

import os
from pathlib import Path

from cpuft.errors import CpuftError

ALLOCATOR_LIBS = {
    "tcmalloc": ("libtcmalloc.so.4", "libtcmalloc_minimal.so.4", "libtcmalloc.so"),
    "jemalloc": ("libjemalloc.so.2", "libjemalloc.so"),
}
LIB_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
)
# jemalloc's defaults return memory to the OS too eagerly for training loops.
JEMALLOC_CONF = "oversize_threshold:1,background_thread:true,metadata_thp:auto,dirty_decay_ms:-1"


def find_allocator(name: str, lib_dirs: tuple[str, ...] = LIB_DIRS) -> str | None:
    """Path of an installed allocator library, or None."""
    for directory in lib_dirs:
        for lib in ALLOCATOR_LIBS[name]:
            path = Path(directory) / lib
            if path.exists():
                return str(path)
    return None


def choose_allocator(
    requested: str, lib_dirs: tuple[str, ...] = LIB_DIRS
) -> tuple[str, str, str]:
    """(allocator, library path, reason). 'auto' prefers tcmalloc, then jemalloc."""
    if requested == "system":
        return "system", "", "requested"
    if requested not in ("auto", *ALLOCATOR_LIBS):
        raise CpuftError(
            f"unknown allocator {requested!r}: use auto, tcmalloc, jemalloc or system"
        )
    candidates = list(ALLOCATOR_LIBS) if requested == "auto" else [requested]
    for name in candidates:
        path = find_allocator(name, lib_dirs)
        if path:
            return name, path, "found " + path
    if requested != "auto":
        raise CpuftError(
            f"allocator {requested} is not installed: apt-get install "
            + ("libgoogle-perftools4" if requested == "tcmalloc" else "libjemalloc2")
            + ", or pass --allocator system"
        )
    return "system", "", (
        "no tcmalloc or jemalloc found (apt-get install libgoogle-perftools4): "
        "running with the system allocator"
    )


def allocator_env(allocator: str, path: str,
                  environ: dict[str, str] | None = None) -> dict[str, str]:
    """Environment variables a process needs so that ``allocator`` (at ``path``) is preloaded."""
    env: dict[str, str] = {}
    current = (environ if environ is not None else os.environ).get("LD_PRELOAD", "")
    if path and path not in current.split(":"):
        env["LD_PRELOAD"] = ":".join(p for p in (path, current) if p)
    if allocator == "jemalloc":
        env["MALLOC_CONF"] = JEMALLOC_CONF
    return env


def preload_env(requested: str = "auto") -> dict[str, str]:
    """What a new process needs in its environment to run on the ``requested`` allocator."""
    allocator, path, _ = choose_allocator(requested)
    return allocator_env(allocator, path)
