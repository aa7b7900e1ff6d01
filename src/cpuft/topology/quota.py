"""The CPU time a process may use, from its cgroup: a CFS quota (cgroup v2's ``cpu.max``, v1's
``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``). Docker and Kubernetes limit CPUs this way,
not with an affinity mask, so a process that counts the cores it may run on alone runs more
threads than it gets time for, and is throttled. Parsed from text; no torch."""

from __future__ import annotations

from pathlib import Path, PurePosixPath


def parse_cpu_max(text: str) -> float | None:
    """CPUs' worth of time from cgroup v2's ``cpu.max`` (``"150000 100000"``: 1.5); None for
    ``max`` (no limit) or text that is not a limit."""
    parts = text.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def parse_cfs(quota_text: str, period_text: str) -> float | None:
    """CPUs' worth of time from cgroup v1's quota and period; None for -1 (no limit)."""
    try:
        quota, period = int(quota_text.strip()), int(period_text.strip())
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def cgroup_paths(proc_cgroup: str) -> tuple[str | None, str | None]:
    """This process's cgroup v2 path and v1 ``cpu`` controller path, from /proc/self/cgroup."""
    v2 = v1 = None
    for line in proc_cgroup.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            v2 = path
        elif "cpu" in controllers.split(","):
            v1 = path
    return v2, v1


def _ancestors(path: str) -> list[str]:
    """``/a/b``, ``/a``, ``/``: a limit anywhere up the hierarchy binds."""
    p = PurePosixPath(path if path.startswith("/") else "/" + path)
    return [str(p), *(str(a) for a in p.parents)]


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def cpu_quota(proc_cgroup: str, root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The tightest CPU quota over this process's cgroup and its ancestors, in CPUs; None
    where none is set."""
    v2, v1 = cgroup_paths(proc_cgroup)
    limits = []
    if v2 is not None:
        base = root if (root / "cgroup.controllers").exists() else root / "unified"
        for a in _ancestors(v2):
            text = _read(base / a.lstrip("/") / "cpu.max")
            if text is not None and (limit := parse_cpu_max(text)) is not None:
                limits.append(limit)
    v1_base = next((root / name for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu")
                    if (root / name).is_dir()), None)
    if v1 is not None and v1_base is not None:
        for a in _ancestors(v1):
            folder = v1_base / a.lstrip("/")
            quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
            if quota is not None and period is not None and \
                    (limit := parse_cfs(quota, period)) is not None:
                limits.append(limit)
    return min(limits) if limits else None
