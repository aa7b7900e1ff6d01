"""The training loop of pytorch/examples' ``mnist/main.py``, rewritten for the CPU, with the two
lines a user adds for cpuft (``cpuft.optimize`` and ``cpuft.autocast``).

The same network (two 3x3 convolutions of 32 and 64 channels, max-pooling, dropout 0.25 and 0.5,
9216 -> 128 -> 10), Adadelta at lr 1.0 with StepLR(gamma 0.7), batches of 64, NLL loss on
log-softmax. MNIST needs a download, so the images are scikit-learn's 8x8 digits scaled to MNIST's
28x28 and normalised with MNIST's mean and deviation: real digits of the same shape.

    python benchmarks/loops/mnist_cnn.py --epochs 2
    cpuft bench --script benchmarks/loops/mnist_cnn.py --rounds 3
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset

import cpuft


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv2(F.relu(self.conv1(x))))
        x = self.dropout1(F.max_pool2d(x, 2)).flatten(1)
        x = self.dropout2(F.relu(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)


def digits(train: bool) -> TensorDataset:
    """Four fifths of the digits to train on, the rest to test, as 1x28x28 images."""
    data = load_digits()
    images = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16
    images = F.interpolate(images, size=(28, 28), mode="bilinear", align_corners=False)
    images = (images - 0.1307) / 0.3081
    labels = torch.tensor(data.target)
    cut = len(labels) * 4 // 5
    part = slice(0, cut) if train else slice(cut, None)
    return TensorDataset(images[part], labels[part])


def train(args: argparse.Namespace, model: nn.Module, loader: DataLoader,
          optimizer: torch.optim.Optimizer, epoch: int) -> None:
    model.train()
    for batch_idx, (data, target) in enumerate(loader):
        optimizer.zero_grad()
        with cpuft.autocast(model):
            output = model(data)
        loss = F.nll_loss(output.float(), target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(loader.dataset)}]"
                  f"\tLoss: {loss.item():.6f}")


def test(model: nn.Module, loader: DataLoader) -> None:
    model.eval()
    test_loss, correct = 0.0, 0
    with torch.no_grad(), cpuft.autocast(model):
        for data, target in loader:
            output = model(data).float()
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            correct += int((output.argmax(dim=1) == target).sum())
    n = len(loader.dataset)
    print(f"\nTest set: Average loss: {test_loss / n:.4f}, Accuracy: {correct}/{n} "
          f"({100.0 * correct / n:.0f}%)\n")


def main() -> None:
    parser = argparse.ArgumentParser(description="the MNIST example's loop, on the CPU")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--test-batch-size", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=14)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--log-interval", type=int, default=10)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    train_loader = DataLoader(digits(True), batch_size=args.batch_size, shuffle=True)
    test_loader = DataLoader(digits(False), batch_size=args.test_batch_size)
    model = Net()
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    # cpuft: channels-last is measured on a batch of this loop's own images.
    model, optimizer = cpuft.optimize(model, optimizer,
                                      example_input=next(iter(train_loader))[0])
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        train(args, model, train_loader, optimizer, epoch)
        test(model, test_loader)
        scheduler.step()


if __name__ == "__main__":
    main()
