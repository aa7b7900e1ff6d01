"""What tests share: tiny models built from a config, small data they can learn, and processes
of a job (environments, ports, ranks)."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import random
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    DistilBertConfig,
    DistilBertForSequenceClassification,
    MPNetConfig,
    MPNetForSequenceClassification,
    RobertaConfig,
    RobertaForSequenceClassification,
)

FIXTURES = Path(__file__).parent / "fixtures"
POSITIVE = ["good", "great", "fun", "moving", "clever", "superb", "charming", "warm"]
NEGATIVE = ["bad", "awful", "boring", "dull", "clumsy", "tedious", "flat", "weak"]
FILLER = ["the", "movie", "film", "plot", "was", "and", "a", "story", "cast", "really", "very"]
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def make_tiny_model(folder: Path, num_labels: int = 2, dropout: float = 0.1,
                    init_range: float = 0.02) -> Path:
    """A 2-layer, 32-wide BERT with random weights and a word-level tokenizer for the words here."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(SPECIAL + POSITIVE + NEGATIVE + FILLER)}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
        sep_token="[SEP]", mask_token="[MASK]",
    )
    config = BertConfig(
        vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, num_labels=num_labels,
        hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
        initializer_range=init_range,
    )
    import torch

    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


def sentiment_rows(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """(text, label) rows: the label follows from the sentiment words in the text."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        label = rng.choice(["pos", "neg"])
        words = rng.sample(POSITIVE if label == "pos" else NEGATIVE, 2)
        words += rng.sample(FILLER, rng.randint(1, 8))
        rng.shuffle(words)
        rows.append((" ".join(words), label))
    return rows


def write_csv(path: Path, rows: list[tuple[str, str]], header: tuple[str, str] = ("text", "label"),
              delimiter: str = ",") -> Path:
    with path.open("w", newline="") as f:
        w = csv.writer(f, delimiter=delimiter)
        w.writerow(header)
        w.writerows(rows)
    return path




# Small models of four encoder families, random weights, no dropout.
SMALL = dict(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
             intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
FAMILIES = {
    "bert": lambda: BertForSequenceClassification(BertConfig(**SMALL)),
    "roberta": lambda: RobertaForSequenceClassification(RobertaConfig(**SMALL)),
    "mpnet": lambda: MPNetForSequenceClassification(MPNetConfig(**SMALL)),
    "distilbert": lambda: DistilBertForSequenceClassification(DistilBertConfig(
        vocab_size=60, dim=32, n_layers=2, n_heads=4, hidden_dim=64, dropout=0.0,
        attention_dropout=0.0)),
}


def batch() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 60, (4, 9), generator=gen)
    mask = torch.ones(4, 9, dtype=torch.long)
    mask[1, 5:] = 0
    return {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([0, 1, 1, 0])}


def backward(model: torch.nn.Module) -> torch.Tensor:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(**batch()).loss
    loss.backward()
    return loss.detach()


def free_port() -> int:
    """A TCP port nothing listens on right now (fixed ports collide with leftovers)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpuft_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **extra})
    return env


def run_two_ranks(script: str, cwd: Path,
                  rank_env: Callable[[int], dict[str, str]] = lambda rank: {},
                  hosts: tuple[str, str] | None = None, master_addr: str = "127.0.0.1",
                  ) -> list[str]:
    """Run ``script`` as ranks 0 and 1 of a gloo job: on this host, or one in each of two
    namespaced ``hosts`` (whose first has ``master_addr``); each rank's last stdout line (the
    test's JSON), after asserting that both exited cleanly."""
    import subprocess
    import sys

    port = free_port()
    procs = []
    for rank in (0, 1):
        local = "0" if hosts else str(rank)
        env = cpuft_env(RANK=str(rank), LOCAL_RANK=local, WORLD_SIZE="2",
                        LOCAL_WORLD_SIZE="1" if hosts else "2", MASTER_ADDR=master_addr,
                        MASTER_PORT=str(port), **rank_env(rank))
        if hosts:
            env["GLOO_SOCKET_IFNAME"] = "eth0"  # the namespaces' link (cpuft.testing.netns)
        argv = [sys.executable, "-c", script]
        if hosts:
            argv = ["ip", "netns", "exec", hosts[rank], *argv]
        procs.append(subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    lines = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        lines.append(out.strip().splitlines()[-1])
    return lines


def job_pids(tag: str, rank: int | None = None) -> list[int]:
    """Processes of the job tagged ``tag`` (launcher excluded), optionally one rank's."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"CPUFT_TEST_TAG={tag}".encode() not in env or b"CPUFT_JOB" not in b"".join(env):
            continue
        with contextlib.suppress(OSError):  # a rank's output relay is not the rank
            if b"cpuft.launch.tagged_output" in (entry / "cmdline").read_bytes():
                continue
        if rank is None or f"RANK={rank}".encode() in env:
            pids.append(int(entry.name))
    return pids


def wait_for(predicate, timeout, what, launcher=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if launcher is not None and launcher.poll() is not None:
            out, err = launcher.communicate()
            raise AssertionError(f"the job ended before {what}: {out[-1500:]} {err[-1500:]}")
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def logged_steps(out):
    path = out / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def kill_rank_and_expect_stop(launcher, tag, out, host):
    """SIGKILL rank 1 mid-run: every process ends within 30 s, the last line names it."""
    wait_for(lambda: logged_steps(out) >= 3, 120, "training to start", launcher)
    [victim] = job_pids(tag, rank=1)
    os.kill(victim, signal.SIGKILL)
    killed_at = time.monotonic()
    _, stderr = launcher.communicate(timeout=60)
    assert time.monotonic() - killed_at < 30
    assert launcher.returncode != 0
    last = stderr.strip().splitlines()[-1]
    assert f"rank 1 on host {host} died (killed by signal 9)" in last, stderr[-2000:]
    wait_for(lambda: not job_pids(tag), 15, "no process of the job left")


LM_SPECIAL = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>"]
LM_WORDS = ["review", ":", "verdict", "fresh", "rotten", "user", "assistant", "system", "is",
            "it", "?", "."]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def make_tiny_llama(folder: Path, seed: int = 0) -> Path:
    """A 2-layer, 32-wide Llama with random weights and a word-level tokenizer with a chat
    template (turns between <|im_start|> and <|im_end|>, as SmolLM2's)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(
        dict.fromkeys(LM_SPECIAL + LM_WORDS + POSITIVE + NEGATIVE + FILLER))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                   eos_token="<|im_end|>",
                                   additional_special_tokens=["<|im_start|>"])
    fast.chat_template = CHAT_TEMPLATE
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=128, tie_word_embeddings=True,
                         pad_token_id=vocab["<pad>"], eos_token_id=vocab["<|im_end|>"],
                         bos_token_id=None)
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


def verdict_rows(n: int, seed: int = 0) -> list[dict[str, str]]:
    """Prompt/response records whose verdict follows from the review's words."""
    return [{"prompt": f"review: {text} verdict:", "response": " fresh" if label == "pos"
             else " rotten"} for text, label in sentiment_rows(n, seed)]


def write_jsonl(path: Path, records: list[dict[str, object]]) -> Path:
    import json

    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def write_tiny_gguf(path: Path, hidden: int = 32, layers: int = 2, heads: int = 4,
                    kv_heads: int = 2, ffn: int = 64, seed: int = 0) -> Path:
    """A 2-layer Llama in a GGUF file, as llama.cpp writes them: byte-level BPE tokens with a
    few merges, a chat template, fp32 tensors (random). transformers dequantizes and loads it."""
    import gguf
    import numpy as np
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    rng = np.random.default_rng(seed)
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    alphabet = sorted(set(bytes_to_unicode().values()))
    merged = ["re", "\u0120g", "oo"]
    tokens = special + alphabet + merged
    vocab = len(tokens)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny")
    w.add_context_length(128)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(hidden // heads)
    w.add_vocab_size(vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([3] * len(special) + [1] * (len(alphabet) + len(merged)))
    w.add_token_merges(["r e", "\u0120 g", "o o"])
    w.add_bos_token_id(0)
    w.add_eos_token_id(2)
    w.add_pad_token_id(0)
    w.add_chat_template(CHAT_TEMPLATE)
    def t(name: str, *shape: int) -> None:
        w.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))
    t("token_embd.weight", vocab, hidden)
    head_dim = hidden // heads
    for i in range(layers):
        t(f"blk.{i}.attn_q.weight", hidden, hidden)
        t(f"blk.{i}.attn_k.weight", kv_heads * head_dim, hidden)
        t(f"blk.{i}.attn_v.weight", kv_heads * head_dim, hidden)
        t(f"blk.{i}.attn_output.weight", hidden, hidden)
        t(f"blk.{i}.ffn_gate.weight", ffn, hidden)
        t(f"blk.{i}.ffn_up.weight", ffn, hidden)
        t(f"blk.{i}.ffn_down.weight", hidden, ffn)
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(hidden, np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(hidden, np.float32))
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def train_args(tiny_model, data_file, out, *extra):
    """cpuft train's argv for the tiny model on a CSV of sentiment rows."""
    return ["train", "--model", str(tiny_model), "--train-file", str(data_file),
            "--text-columns", "text", "--batch-size", "8", "--lr-schedule", "constant",
            "--warmup-ratio", "0", "--lr", "1e-3", "--log-steps", "1", "--no-progress",
            "--output-dir", str(out), *extra]


def calibration_file(folder: Path, **changes: object) -> Path:
    """A run folder's summary.json holding only forecast inputs, ``changes`` applied."""
    inputs = {"recipe": "classifier", "model": "tiny", "seconds_per_step": 0.5,
              "samples_per_step": 32, "nodes": 1, "comm_wait_fraction": 0.0,
              "physical_cores": 2, "isa": "avx2", "dense_gradient_bytes": 90e6,
              "sparse_gradient_bytes": 0.0, **changes}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "summary.json"
    path.write_text(json.dumps({"forecast_inputs": inputs}))
    return path


# fp32 sums of the same gradients in another order differ in the last bits; after 6 AdamW steps
# at lr 1e-4 the parameters of the two runs must agree to within this (seen: 1.3e-7).
TOLERANCE = 1e-6
# Attention key biases get a gradient that is exactly 0 in exact arithmetic (softmax does not
# change when the same number is added to every score of a row); AdamW scales the rounding noise
# left in its place up to full-size steps, so these differ between any two summation orders.
ZERO_GRADIENT = ".attention.self.key.bias"


def parameters_differ(one: Path, two: Path) -> float:
    """The largest difference between two runs' saved parameters (those with an exactly-zero
    gradient left out)."""
    from safetensors.torch import load_file

    a, b = load_file(one / "model.safetensors"), load_file(two / "model.safetensors")
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a if ZERO_GRADIENT not in k)


ALL_REDUCE_SCRIPT = """
import json, os
import torch
import cpuft.distributed

rank, world = cpuft.distributed.init()
t = torch.tensor([float(rank + 1)])
torch.distributed.all_reduce(t)
print("RESULT " + json.dumps({"rank": rank, "world": world, "sum": float(t),
                              "ifname": os.environ.get("GLOO_SOCKET_IFNAME", "")}), flush=True)
"""
"""A script that joins its job and sums rank + 1 over it; each rank prints a RESULT line."""


def all_reduce_results(outs: list[str]) -> list[dict[str, Any]]:
    """The RESULT lines of ``ALL_REDUCE_SCRIPT`` in ``outs``, by rank."""
    found = [json.loads(r) for out in outs for r in re.findall(r"RESULT (\{[^{}]*\})", out)]
    return sorted(found, key=lambda r: r["rank"])
