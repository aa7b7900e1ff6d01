"""What a causal-LM run will hold in memory, estimated before anything large is loaded."""

from __future__ import annotations

from typing import Any

from cpuft.config import CausalLmConfig, TrainConfig
from cpuft.errors import CpuftError, first_line
from cpuft.log import get_logger

LOG = get_logger(__name__)


def node_memory_bytes() -> int:
    import psutil

    return int(psutil.virtual_memory().total)


def estimate(*, params: int, trainable: int, layers: int, hidden: int, vocab: int,
             batch: int, seq: int, checkpointing: bool) -> dict[str, int]:
    """Bytes of weights, gradients, optimizer state and activations of one fp32 training step.

    Activations follow the usual transformer count (about 34 bytes a token per hidden unit and
    layer in 16-bit, doubled here for fp32), plus the logits over the vocabulary; with
    checkpointing only each layer's input is kept.
    """
    per_layer = (2 if checkpointing else 68) * batch * seq * hidden
    return {
        "weights": params * 4,
        "gradients": trainable * 4,
        "optimizer": trainable * 8,
        "activations": per_layer * layers + 3 * batch * seq * vocab * 4,
    }


def _unreadable_gguf(path: str) -> str:
    """Why the GGUF file at ``path`` does not parse, or '' where it does."""
    try:
        from gguf import GGUFReader

        GGUFReader(path)
    except Exception as e:  # any failure to parse is the answer sought
        return f"{type(e).__name__}: {first_line(e, 120)}" if str(e).strip() else \
            type(e).__name__
    return ""


def check_memory(folder: str, gguf_file: str | None, cfg: TrainConfig,
                 available: int | None = None) -> dict[str, int]:
    """Print the estimate; refuse, with it, a run that would not fit in this node's memory."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    kwargs = {"gguf_file": gguf_file} if gguf_file else {}
    try:
        config = AutoConfig.from_pretrained(folder, **kwargs)
        with torch.device("meta"):
            skeleton = AutoModelForCausalLM.from_config(config)
    except (ValueError, OSError) as e:
        where = f"{folder}/{gguf_file}" if gguf_file else folder
        damaged = _unreadable_gguf(f"{folder}/{gguf_file}") if gguf_file else ""
        if damaged:
            raise CpuftError(f"--model {where}: the GGUF file does not read, truncated or "
                             f"damaged ({damaged})") from None
        raise CpuftError(f"--model {where}: not a causal language model "
                         f"({first_line(e)})") from None
    params = sum(p.numel() for p in skeleton.parameters())
    m = cfg.of(CausalLmConfig)
    trainable = params if m.lora_r == 0 else _lora_params(skeleton, m.lora_r, m.lora_targets)
    parts = estimate(params=params, trainable=trainable,
                     layers=int(getattr(config, "num_hidden_layers", 1)),
                     hidden=int(getattr(config, "hidden_size", 1)),
                     vocab=int(getattr(config, "vocab_size", 1)),
                     batch=cfg.optimization.batch_size, seq=cfg.data.max_seq_length,
                     checkpointing=m.gradient_checkpointing)
    total = sum(parts.values())
    shown = ", ".join(f"{k} {v / 2**30:.2f}" for k, v in parts.items())
    LOG.info(f"memory estimate: {total / 2**30:.2f} GiB ({shown} GiB) at batch "
        f"{cfg.optimization.batch_size} of {cfg.data.max_seq_length} tokens")
    have = node_memory_bytes() if available is None else available
    if total > have:
        raise CpuftError(f"this run needs about {total / 2**30:.1f} GiB ({shown} GiB) and this "
                         f"node has {have / 2**30:.1f} GiB: lower --batch-size or "
                         "--max-seq-length, use LoRA (--lora-r 8) or --gradient-checkpointing")
    return parts


def _lora_params(model: Any, rank: int, targets: list[str]) -> int:
    """Parameters of rank-``rank`` adapters on the targeted linear layers (all but the head)."""
    from torch import nn

    count = 0
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear) or name.endswith("lm_head"):
            continue
        if targets and name.rsplit(".", 1)[-1] not in targets:
            continue
        count += rank * (module.in_features + module.out_features)
    return count
