"""Compile a kernel of this folder for this CPU once, cache the library, load it with ctypes.

The compiler is the machine's (``$CC``, else ``cc``), at -O3 -march=native with OpenMP. The
library links libgomp.so.1: loaded after torch, that name resolves to the OpenMP runtime torch
already runs, so a kernel's threads are torch's threads, pinned as torch's are. Libraries are
cached under the cpuft cache folder by a hash of the source, the flags, the compiler and this
CPU's flags, so that a home folder shared by different machines never loads a wrong build.
Where nothing compiles, ``load`` says why and callers fall back to torch ops.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

from cpuft.kernels.signature import Kernel
from cpuft.launch.proc import run_command
from cpuft.speedplan.compile_cache import cache_path
from cpuft.topology.cpu import parse_cpuinfo

FLAGS = ("-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-shared", "-fPIC")


def kernel_dir() -> Path:
    return cache_path().parent / "kernels"


def _this_cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The model name and ISA flags that -march=native builds for."""
    try:
        model, flags = parse_cpuinfo(cpuinfo.read_text())
    except OSError:
        return ""
    return " ".join([model, *sorted(flags)])


def find_compiler() -> str:
    """The C compiler to build with: ``$CC``, else ``cc`` or ``gcc`` on PATH ('' if none)."""
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or ""


def library_name(name: str, source: bytes, cc: str, cpu_flags: str) -> str:
    digest = hashlib.sha256(b"\0".join(
        [source, " ".join(FLAGS).encode(), cc.encode(), cpu_flags.encode()])).hexdigest()
    return f"{name}-{digest[:16]}.so"


def not_private(path: Path) -> str:
    """Why ``path`` may hold another user's code ('' when it is this user's own, a plain file or
    folder, and nobody else may write it)."""
    st = path.lstat()
    if st.st_uid != os.getuid():
        return f"{path} belongs to another user (uid {st.st_uid})"
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link"
    if st.st_mode & 0o022:
        return f"{path} is writable by others"
    return ""


def _compile(cc: str, source: Path, target: Path) -> str:
    """Build ``source`` into ``target`` atomically (a concurrent rank sees all or nothing)."""
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        built = Path(tmp) / target.name
        failed = run_command([cc, *FLAGS, str(source), "-o", str(built)])
        if not failed:
            os.replace(built, target)
        return failed


@functools.cache
def load(name: str) -> tuple[ctypes.CDLL | None, str]:
    """(library, what was done) for ``<name>.c`` of this folder, or (None, why not).

    A cached library is loaded only from a folder and a file that are this user's and that no
    one else may write: loading runs its code. Otherwise it is built again in a private folder
    for this process, and the note says why.
    """
    if os.environ.get("CPUFT_NO_KERNELS"):
        return None, "CPUFT_NO_KERNELS is set"
    cc = find_compiler()
    if not cc:
        return None, "no C compiler (cc or $CC) on PATH"
    source = Path(__file__).with_name(f"{name}.c")
    target = kernel_dir() / library_name(name, source.read_bytes(), cc, _this_cpu())
    distrust = ""
    try:
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        distrust = not_private(target.parent) or (not_private(target) if target.exists() else "")
    except OSError as err:
        distrust = f"cannot use {target.parent}: {err.strerror or err}"
    if distrust:
        target = Path(tempfile.mkdtemp(prefix="cpuft-kernels-")) / target.name
    try:
        if not target.exists():
            failed = _compile(cc, source, target)
            if failed:
                return None, failed
    except OSError as err:
        return None, f"cannot write {target.parent}: {err.strerror or err}"
    note = f"built with {cc} -march=native ({target})"
    if distrust:
        note += f"; not the cache, since {distrust}"
    try:
        return ctypes.CDLL(str(target)), note
    except OSError as err:
        return None, f"cannot load {target}: {err}"


def load_kernel(name: str, function: str) -> tuple[Kernel | None, str]:
    """(the C ``function`` of ``<name>.c``, bound from its prototype, what was done), or
    (None, why not): also where a cached library lacks the function."""
    lib, note = load(name)
    if lib is None:
        return None, note
    try:
        symbol = getattr(lib, function)
    except AttributeError:
        return None, f"{function} is missing from the library ({note})"
    source = Path(__file__).with_name(f"{name}.c").read_text()
    return Kernel(symbol, source, function), note
