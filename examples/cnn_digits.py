"""A ResNet-style CNN, in plain torch, on scikit-learn's 8x8 handwritten digits (1,797 real
images, 10 classes), trained a plain way, with ``cpuft.optimize`` or with ``cpuft.fit``.

    python examples/cnn_digits.py --way optimize
    python examples/cnn_digits.py --way plain --epochs 10
    cpuft launch --nproc-per-node 2 examples/cnn_digits.py --way fit

Prints the test accuracy; its last line is a JSON document.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import TensorDataset

sys.path.insert(0, str(Path(__file__).parent))
from common import accuracy, parse_args, report, train


class Block(nn.Module):
    """A ResNet basic block: two 3x3 convolutions with batch norm, and the shortcut."""

    def __init__(self, channels_in: int, channels: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels_in, channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or channels_in != channels:
            self.shortcut = nn.Sequential(nn.Conv2d(channels_in, channels, 1, stride, bias=False),
                                          nn.BatchNorm2d(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet(nn.Module):
    """A small ResNet: a stem, three stages of two blocks (widths ``widths``), global pooling,
    dropout and a linear head. It takes images of any size."""

    def __init__(self, classes: int = 10, channels_in: int = 1,
                 widths: tuple[int, int, int] = (32, 64, 128)) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(channels_in, widths[0], 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(widths[0]), nn.ReLU())
        stages, width = [], widths[0]
        for i, w in enumerate(widths):
            stages += [Block(width, w, stride=1 if i == 0 else 2), Block(w, w)]
            width = w
        self.stages = nn.Sequential(*stages)
        self.drop = nn.Dropout(0.2)
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.stages(self.stem(x)).mean(dim=(2, 3))
        return self.head(self.drop(features))


def digits() -> tuple[TensorDataset, TensorDataset]:
    """The 8x8 digits as [1, 8, 8] images scaled to [0, 1], split 80/20 with a fixed seed."""
    from sklearn.datasets import load_digits

    data = load_digits()
    images = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16.0
    labels = torch.tensor(data.target, dtype=torch.long)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))
    cut = int(0.8 * len(order))
    train_idx, test_idx = order[:cut], order[cut:]
    return (TensorDataset(images[train_idx], labels[train_idx]),
            TensorDataset(images[test_idx], labels[test_idx]))


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], epochs=8, lr=3e-3)
    train_set, test_set = digits()
    torch.manual_seed(args.seed)
    model = ResNet()
    result = train(model, train_set, args, nn.functional.cross_entropy)
    report(result, accuracy(model, test_set))


if __name__ == "__main__":
    main()
