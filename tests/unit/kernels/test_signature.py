"""Each kernel's arguments are declared once, in its C prototype, and called by name."""

import ctypes
from pathlib import Path

import pytest

import cpuft.kernels
from cpuft.kernels import build
from cpuft.kernels.signature import Kernel, parse_prototype

SOURCES = Path(cpuft.kernels.__file__).parent


def test_prototypes_are_read_from_the_c_sources():
    restype, params = parse_prototype((SOURCES / "adamw_bf16.c").read_text(), "cpuft_adamw_bf16")
    assert restype is None
    assert [p.name for p in params] == [
        "n", "grads16", "grads32", "masters", "exp_avgs", "exp_avg_sqs", "weights", "sizes",
        "decay", "step_size", "bc2_sqrt", "one_minus_beta1", "beta2", "one_minus_beta2", "eps",
        "grad_divisor"]
    kinds = {p.name: p.ctype for p in params}
    assert kinds["n"] is ctypes.c_int and kinds["eps"] is ctypes.c_float
    assert kinds["masters"] is ctypes.POINTER(ctypes.c_void_p)
    assert kinds["sizes"] is ctypes.POINTER(ctypes.c_int64)
    restype, params = parse_prototype((SOURCES / "dropout_mask.c").read_text(),
                                      "cpuft_dropout_mask")
    assert [p.name for p in params] == ["n", "width", "seed", "keep_from", "scale", "out"]
    assert params[2].ctype is ctypes.c_uint64 and params[5].ctype is ctypes.c_void_p
    restype, _ = parse_prototype((SOURCES / "adamw_bf16.c").read_text(),
                                 "cpuft_bf16_sum_squares")
    assert restype is ctypes.c_double


def test_an_unknown_c_type_or_function_is_refused():
    with pytest.raises(ValueError, match="no ctypes binding"):
        parse_prototype("void f(size_t n) {", "f")
    with pytest.raises(ValueError, match="no definition of g"):
        parse_prototype("void f(int n) {", "g")


class _Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, *args):
        self.calls.append(args)
        return 7


def test_a_kernel_is_called_by_parameter_names_in_the_c_order():
    function = _Recorder()
    kernel = Kernel(function, "int add(int a, double b, const float *c) {", "add")
    assert kernel(c=None, b=2.0, a=1) == 7
    assert function.calls == [(1, 2.0, None)]
    assert function.argtypes == [ctypes.c_int, ctypes.c_double, ctypes.POINTER(ctypes.c_float)]
    with pytest.raises(TypeError, match=r"missing \['c'\], unknown \['d'\]"):
        kernel(a=1, b=2.0, d=3)


def test_a_library_without_the_function_falls_back_and_says_why(monkeypatch, tmp_path):
    monkeypatch.setenv("CPUFT_CACHE", str(tmp_path))
    build.load.cache_clear()
    try:
        kernel, note = build.load_kernel("dropout_mask", "cpuft_no_such_function")
        assert kernel is None and "cpuft_no_such_function is missing" in note
        kernel, note = build.load_kernel("dropout_mask", "cpuft_dropout_mask")
        assert kernel is not None, note
    finally:
        build.load.cache_clear()


def test_a_library_planted_in_a_shared_cache_is_never_loaded(monkeypatch, tmp_path):
    """Another user's .so where cpuft would look for its own: its constructor must not run."""
    import os
    import subprocess

    shared = tmp_path / "shared"
    (shared / "kernels").mkdir(parents=True)
    for folder in (shared, shared / "kernels"):
        folder.chmod(0o777)
    monkeypatch.setenv("CPUFT_CACHE", str(shared))
    source = (SOURCES / "dropout_mask.c").read_bytes()
    cc = build.find_compiler()
    planted = shared / "kernels" / build.library_name("dropout_mask", source, cc,
                                                       build._this_cpu())
    marker = tmp_path / "constructor-ran"
    evil = tmp_path / "evil.c"
    evil.write_text('#include <stdio.h>\n__attribute__((constructor)) static void run(void) '
                    f'{{ FILE *f = fopen("{marker}", "w"); if (f) fclose(f); }}\n'
                    "void cpuft_dropout_mask(void) {}\n")
    subprocess.run([cc, "-shared", "-fPIC", str(evil), "-o", str(planted)], check=True)
    if os.getuid() == 0:
        os.chown(planted, 65534, 65534)  # nobody's
    build.load.cache_clear()
    try:
        kernel, note = build.load_kernel("dropout_mask", "cpuft_dropout_mask")
        assert not marker.exists()
        assert kernel is not None and "not the cache, since" in note, note
        assert "writable by others" in note or "another user" in note
    finally:
        build.load.cache_clear()
