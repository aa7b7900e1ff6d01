"""The training loop of pytorch/examples' ``distributed/ddp-tutorial-series/multinode.py``,
rewritten for the CPU (gloo in place of NCCL), with the two lines a user adds for cpuft.

The same job: a ``Linear(20, 1)`` on 2048 random samples, SGD at lr 1e-3, batches of 32 a rank
through a DistributedSampler, cross-entropy as the tutorial computes it, DDP, and a snapshot
every ``save_every`` epochs that a restarted job resumes from. Started by torchrun (or
``cpuft launch``), which sets RANK, LOCAL_RANK and WORLD_SIZE:

    torchrun --standalone --nproc-per-node 2 benchmarks/loops/ddp_multinode.py 5 1
    cpuft bench --script benchmarks/loops/ddp_multinode.py --nproc-per-node 2 -- 50 10
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

import cpuft


class RandomRows(Dataset):
    def __init__(self, size: int) -> None:
        self.rows = [(torch.rand(20), torch.rand(1)) for _ in range(size)]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.rows[index]


class Trainer:
    def __init__(self, model: torch.nn.Module, train_data: DataLoader,
                 optimizer: torch.optim.Optimizer, save_every: int, snapshot_path: str) -> None:
        self.global_rank = int(os.environ["RANK"])
        self.train_data, self.optimizer = train_data, optimizer
        self.save_every, self.snapshot_path = save_every, snapshot_path
        self.epochs_run = 0
        if os.path.exists(snapshot_path):
            snapshot = torch.load(snapshot_path, weights_only=True)
            model.load_state_dict(snapshot["MODEL_STATE"])
            self.epochs_run = snapshot["EPOCHS_RUN"]
            print(f"Resuming training from snapshot at Epoch {self.epochs_run}")
        self.model = DDP(model)

    def _run_batch(self, source: torch.Tensor, targets: torch.Tensor) -> None:
        self.optimizer.zero_grad()
        with cpuft.autocast():
            output = self.model(source)
        loss = F.cross_entropy(output.float(), targets)
        loss.backward()
        self.optimizer.step()

    def _run_epoch(self, epoch: int) -> None:
        sampler = self.train_data.sampler
        assert isinstance(sampler, DistributedSampler)
        sampler.set_epoch(epoch)
        print(f"[RANK{self.global_rank}] Epoch {epoch} | Steps: {len(self.train_data)}")
        for source, targets in self.train_data:
            self._run_batch(source, targets)

    def train(self, max_epochs: int) -> None:
        for epoch in range(self.epochs_run, max_epochs):
            self._run_epoch(epoch)
            if self.global_rank == 0 and epoch % self.save_every == 0:
                torch.save({"MODEL_STATE": self.model.module.state_dict(),
                            "EPOCHS_RUN": epoch}, self.snapshot_path)
                print(f"Epoch {epoch} | Training snapshot saved at {self.snapshot_path}")


def main() -> None:
    parser = argparse.ArgumentParser(description="the DDP tutorial's multinode job, on CPUs")
    parser.add_argument("total_epochs", type=int)
    parser.add_argument("save_every", type=int)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--snapshot_path", default="snapshot.pt")
    args = parser.parse_args()
    dist.init_process_group(backend="gloo")
    dataset = RandomRows(2048)
    model = torch.nn.Linear(20, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    model, optimizer = cpuft.optimize(model, optimizer)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=False,
                        sampler=DistributedSampler(dataset))
    Trainer(model, loader, optimizer, args.save_every, args.snapshot_path).train(args.total_epochs)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
