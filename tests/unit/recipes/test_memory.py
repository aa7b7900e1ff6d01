"""The causal-LM memory estimate, by hand, and its refusal."""

import pytest

from cpuft.config import config_from
from cpuft.errors import CpuftError
from cpuft.recipes.memory import check_memory, estimate
from tests.helpers import make_tiny_llama, write_tiny_gguf


def test_estimate_by_hand():
    parts = estimate(params=100, trainable=10, layers=2, hidden=4, vocab=7, batch=3, seq=5,
                     checkpointing=False)
    assert parts == {"weights": 400, "gradients": 40, "optimizer": 80,
                     "activations": 68 * 3 * 5 * 4 * 2 + 3 * 3 * 5 * 7 * 4}
    kept = estimate(params=100, trainable=10, layers=2, hidden=4, vocab=7, batch=3, seq=5,
                    checkpointing=True)["activations"]
    assert kept == 2 * 3 * 5 * 4 * 2 + 3 * 3 * 5 * 7 * 4


def test_lora_trains_far_fewer_weights_and_a_run_too_big_is_refused(tmp_path, said):
    model = make_tiny_llama(tmp_path / "llama")
    full = check_memory(str(model), None, config_from({"lora_r": 0}))
    lora = check_memory(str(model), None, config_from({"lora_r": 2}))
    assert lora["gradients"] < full["gradients"] / 3 and lora["weights"] == full["weights"]
    assert said[0].startswith("memory estimate: ")
    with pytest.raises(CpuftError, match=r"this run needs about .* GiB .* this node has 0.0 GiB"):
        check_memory(str(model), None, config_from({}), available=1000)


def test_a_truncated_gguf_file_is_named_damaged(tmp_path):
    whole = write_tiny_gguf(tmp_path / "whole.gguf")
    data = whole.read_bytes()
    (tmp_path / "cut.gguf").write_bytes(data[: len(data) // 3])
    with pytest.raises(CpuftError, match=r"cut\.gguf: the GGUF file does not read, truncated "
                                         r"or damaged"):
        check_memory(str(tmp_path), "cut.gguf", config_from({}))
