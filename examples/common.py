"""The three ways every example trains its model, and how it reports.

- ``plain``: a plain PyTorch loop, as a tutorial writes it (fp32, torch's AdamW);
- ``optimize``: the same loop after ``cpuft.optimize``, its forward under ``cpuft.autocast``;
- ``fit``: ``cpuft.fit``.

Started by ``cpuft launch``, each joins the job (``cpuft.distributed.init``); the two loops then
shard the data with a DistributedSampler and wrap the model in DDP, as a user would.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler

import cpuft
import cpuft.distributed

WAYS = ("plain", "optimize", "fit")


def parse_args(description: str, epochs: int, lr: float) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--way", choices=WAYS, default="optimize")
    parser.add_argument("--epochs", type=float, default=epochs)
    parser.add_argument("--max-steps", type=int, default=0, help="stop after N steps (0: epochs)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=lr)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def train(model: nn.Module, train_set: Dataset, args: argparse.Namespace,
          criterion: Callable[[Any, Any], torch.Tensor], collate: Any = None) -> dict[str, Any]:
    """Train ``model`` the chosen way; the steps taken, the seconds and the samples a second."""
    rank, world = cpuft.distributed.init()
    torch.manual_seed(args.seed)
    sampler = DistributedSampler(train_set, seed=args.seed) if world > 1 else None
    loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=sampler is None,
                        sampler=sampler, collate_fn=collate, drop_last=True)
    steps = args.max_steps or int(args.epochs * len(loader))
    started = time.perf_counter()
    if args.way == "fit":
        cpuft.fit(model, loader, criterion=criterion, max_steps=steps, lr=args.lr,
                  lr_schedule="constant", warmup_ratio=0.0, weight_decay=0.0,
                  seed=args.seed, progress=False)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
        if args.way == "optimize":
            inputs = next(iter(loader))[0]  # channels-last is measured on a real batch
            example = inputs if isinstance(inputs, torch.Tensor) and inputs.dim() == 4 else None
            model, optimizer = cpuft.optimize(model, optimizer, example_input=example)
        _loop(model, optimizer, loader, sampler, criterion, steps, world)
    seconds = time.perf_counter() - started
    return {"way": args.way, "rank": rank, "world_size": world, "steps": steps,
            "seconds": seconds, "samples_per_second": steps * args.batch_size * world / seconds,
            "plan": cpuft.report_plan(model) if args.way == "optimize" else None}


def _loop(model: nn.Module, optimizer: Any, loader: DataLoader, sampler: Any,
          criterion: Callable[[Any, Any], torch.Tensor], steps: int, world: int) -> None:
    trained = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    model.train()
    step, epoch = 0, 0
    while step < steps:
        if sampler is not None:
            sampler.set_epoch(epoch)
        for inputs, targets in loader:
            with cpuft.autocast(model):
                loss = criterion(trained(inputs).float(), targets)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            if step == steps:
                break
        epoch += 1


@torch.no_grad()
def accuracy(model: nn.Module, test_set: Dataset, collate: Any = None) -> float:
    model.eval()
    right = total = 0
    for inputs, targets in DataLoader(test_set, batch_size=256, collate_fn=collate):
        with cpuft.autocast(model):
            right += int((model(inputs).argmax(dim=-1) == targets).sum())
        total += len(targets)
    return right / total


def report(result: dict[str, Any], test_accuracy: float) -> None:
    """Rank 0 prints the result; its last line is the JSON."""
    if result["rank"] != 0:
        return
    print(f"{result['way']}: {result['steps']} steps in {result['seconds']:.1f}s "
          f"({result['samples_per_second']:.0f} samples/s), test accuracy {test_accuracy:.4f}")
    print(json.dumps({**{k: v for k, v in result.items() if k != "plan"},
                      "test_accuracy": test_accuracy}))
