import pytest

from cpuft.errors import CpuftError
from cpuft.speedplan.allocator import allocator_env, choose_allocator
from cpuft.speedplan.choices import choose_bf16_weights, choose_compile


def test_allocator_found_in_given_dirs(tmp_path):
    (tmp_path / "libjemalloc.so.2").write_bytes(b"")
    name, path, _ = choose_allocator("auto", (str(tmp_path),))
    assert name == "jemalloc" and path == str(tmp_path / "libjemalloc.so.2")
    (tmp_path / "libtcmalloc.so.4").write_bytes(b"")
    assert choose_allocator("auto", (str(tmp_path),))[0] == "tcmalloc"


def test_allocator_missing(tmp_path):
    name, path, reason = choose_allocator("auto", (str(tmp_path),))
    assert (name, path) == ("system", "") and "libgoogle-perftools4" in reason
    with pytest.raises(CpuftError, match="not installed"):
        choose_allocator("tcmalloc", (str(tmp_path),))


def test_allocator_env_prepends_once():
    plan = ("tcmalloc", "/lib/libtcmalloc.so.4")
    assert allocator_env(*plan, {"LD_PRELOAD": "/x.so"}) == {
        "LD_PRELOAD": "/lib/libtcmalloc.so.4:/x.so"
    }
    assert allocator_env(*plan, {"LD_PRELOAD": "/lib/libtcmalloc.so.4"}) == {}


def test_compile_pays_only_when_saving_beats_cost():
    assert choose_compile("auto", estimated_eager_seconds=None, measured_speedup=None,
                          compile_seconds=None)[0] == "off"
    on, why = choose_compile("auto", estimated_eager_seconds=600, measured_speedup=1.5,
                             compile_seconds=75)
    assert on == "on" and "saves ~200s" in why
    assert choose_compile("auto", estimated_eager_seconds=100, measured_speedup=1.5,
                          compile_seconds=75)[0] == "off"
    assert choose_compile("on", estimated_eager_seconds=None, measured_speedup=None,
                          compile_seconds=None) == ("on", "requested")


def test_bf16_weights_on_by_default_off_on_request_or_with_powersgd():
    assert choose_bf16_weights(True, "none")[0] is True
    assert choose_bf16_weights(True, "bf16")[0] is True
    assert choose_bf16_weights(False, "none") == (False, "requested")
    on, reason = choose_bf16_weights(True, "powersgd")
    assert on is False and "powersgd" in reason
