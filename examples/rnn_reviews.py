"""A GRU text classifier on the Rotten Tomatoes snippets (fresh or rotten), with a word
vocabulary built from the training split, trained a plain way, with ``cpuft.optimize`` or with
``cpuft.fit``.

    python examples/rnn_reviews.py --way optimize
    cpuft launch --nproc-per-node 2 examples/rnn_reviews.py --way fit

The snippets come from cpuft's default data (``make setup`` fetches them). Prints the test
accuracy; its last line is a JSON document.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence

sys.path.insert(0, str(Path(__file__).parent))
from common import accuracy, parse_args, report, train

WORD = re.compile(r"[a-z0-9']+")
VOCABULARY = 20_000
PAD, UNKNOWN = 0, 1


class GruClassifier(nn.Module):
    """Embeddings, a bidirectional GRU over the real tokens (packed, so padding is never read),
    dropout and a linear head on the last hidden states of both directions."""

    def __init__(self, vocabulary: int, classes: int = 2, width: int = 128,
                 hidden: int = 128) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocabulary, width, padding_idx=PAD)
        self.gru = nn.GRU(width, hidden, batch_first=True, bidirectional=True)
        self.drop = nn.Dropout(0.3)
        self.head = nn.Linear(2 * hidden, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        lengths = (ids != PAD).sum(dim=1).clamp(min=1).cpu()
        packed = pack_padded_sequence(self.embed(ids), lengths, batch_first=True,
                                      enforce_sorted=False)
        _, last = self.gru(packed)  # [2 directions, batch, hidden]
        return self.head(self.drop(torch.cat([last[0], last[1]], dim=-1)))


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def reviews() -> tuple[list[tuple[torch.Tensor, int]], list[tuple[torch.Tensor, int]], int]:
    """(ids, label) pairs of the training and test splits, and the vocabulary's size."""
    from cpuft.data.rotten_tomatoes import load_splits

    splits = load_splits()
    labels = sorted({row["category"] for row in splits["train"]})
    counts = Counter(w for row in splits["train"] for w in words(row["text"]))
    index = {w: i + 2 for i, (w, _) in enumerate(counts.most_common(VOCABULARY - 2))}

    def encode(split: str) -> list[tuple[torch.Tensor, int]]:
        return [(torch.tensor([index.get(w, UNKNOWN) for w in words(row["text"])] or [UNKNOWN]),
                 labels.index(row["category"])) for row in splits[split]]

    return encode("train"), encode("test"), len(index) + 2


def collate(rows: list[tuple[torch.Tensor, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    ids = pad_sequence([r[0] for r in rows], batch_first=True, padding_value=PAD)
    return ids, torch.tensor([r[1] for r in rows])


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], epochs=3, lr=2e-3)
    train_set, test_set, vocabulary = reviews()
    torch.manual_seed(args.seed)
    model = GruClassifier(vocabulary)
    data: Any = train_set
    result = train(model, data, args, nn.functional.cross_entropy, collate=collate)
    report(result, accuracy(model, test_set, collate=collate))


if __name__ == "__main__":
    main()
