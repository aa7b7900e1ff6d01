"""Shared fixtures: a tiny random-init BERT with its own tokenizer, and small data it can learn."""

from __future__ import annotations

import csv
import os
import random
from collections.abc import Callable
from pathlib import Path

import pytest

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


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")


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
                  rank_env: Callable[[int], dict[str, str]] = lambda rank: {}) -> list[str]:
    """Run ``script`` as ranks 0 and 1 of a gloo job on this host; each rank's last stdout
    line (the test's JSON), after asserting that both exited cleanly."""
    import subprocess
    import sys

    port = free_port()
    procs = []
    for rank in (0, 1):
        env = cpuft_env(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
                        LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                        **rank_env(rank))
        procs.append(subprocess.Popen([sys.executable, "-c", script], env=env, cwd=cwd,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    lines = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        lines.append(out.strip().splitlines()[-1])
    return lines
