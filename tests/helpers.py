"""What tests share: tiny models built from a config, small data they can learn, and processes
of a job (environments, ports, ranks)."""

from __future__ import annotations

import csv
import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path

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
