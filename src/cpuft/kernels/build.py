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
import tempfile
from pathlib import Path

from cpuft.kernels.signature import Kernel
from cpuft.launch.proc import run_command
from cpuft.plan.compile_cache import cache_path
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


@functools.cache
def load(name: str) -> tuple[ctypes.CDLL | None, str]:
    """(library, what was done) for ``<name>.c`` of this folder, or (None, why not)."""
    if os.environ.get("CPUFT_NO_KERNELS"):
        return None, "CPUFT_NO_KERNELS is set"
    cc = find_compiler()
    if not cc:
        return None, "no C compiler (cc or $CC) on PATH"
    source = Path(__file__).with_name(f"{name}.c")
    target = kernel_dir() / library_name(name, source.read_bytes(), cc, _this_cpu())
    if not target.exists():
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
                built = Path(tmp) / target.name
                failed = run_command([cc, *FLAGS, str(source), "-o", str(built)])
                if failed:
                    return None, failed
                os.replace(built, target)  # atomic: a concurrent rank sees all or nothing
        except OSError as err:
            return None, f"cannot write {target.parent}: {err.strerror or err}"
    try:
        return ctypes.CDLL(str(target)), f"built with {cc} -march=native ({target})"
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
