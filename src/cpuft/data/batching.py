"""Batches: which samples go together (length-grouped, seeded per epoch) and how they are padded."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from cpuft.data.prepare import Encoded


def epoch_batches(
    lengths: list[int],
    batch_size: int,
    *,
    seed: int,
    epoch: int,
    group_by_length: bool = True,
    megabatch: int = 50,
) -> list[list[int]]:
    """Index lists for one epoch; the same (seed, epoch) always gives the same batches.

    With ``group_by_length`` the shuffled indices are cut into mega-batches of
    ``megabatch * batch_size``, each sorted by length before it is cut into batches, and the
    batches are shuffled again: little padding, still a random order.
    """
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    order = torch.randperm(len(lengths), generator=g).tolist()
    if not group_by_length:
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    span = batch_size * megabatch
    batches: list[list[int]] = []
    for start in range(0, len(order), span):
        chunk = sorted(order[start : start + span], key=lambda i: -lengths[i])
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
    shuffle = torch.randperm(len(batches), generator=g).tolist()
    return [batches[i] for i in shuffle]


@dataclass(slots=True)
class Collator:
    """Pads token ids to the batch's longest row (or to ``fixed_length``) and builds masks."""

    pad_id: int
    fixed_length: int = 0
    pad_to_multiple_of: int = 1

    def __call__(self, data: Encoded, indices: list[int]) -> dict[str, torch.Tensor]:
        rows = [data.input_ids[i] for i in indices]
        width = self.fixed_length or max(len(r) for r in rows)
        if self.pad_to_multiple_of > 1:
            width = -(-width // self.pad_to_multiple_of) * self.pad_to_multiple_of
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, ids in enumerate(rows):
            input_ids[r, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            attention_mask[r, : len(ids)] = 1
        batch = {"input_ids": input_ids, "attention_mask": attention_mask}
        if data.token_type_ids is not None:
            types = torch.zeros((len(rows), width), dtype=torch.long)
            for r, i in enumerate(indices):
                t = data.token_type_ids[i]
                types[r, : len(t)] = torch.tensor(t, dtype=torch.long)
            batch["token_type_ids"] = types
        labels = [data.labels[i] for i in indices]
        dtype = torch.float32 if labels and isinstance(labels[0], float) else torch.long
        batch["labels"] = torch.tensor(labels, dtype=dtype)
        return batch


def shard(batch: list[int], rank: int, world_size: int) -> list[int]:
    """This rank's contiguous share of a global batch (shares differ in size by at most one)."""
    n = len(batch)
    return batch[rank * n // world_size : (rank + 1) * n // world_size]


@dataclass(slots=True)
class TokenBatches:
    """The training batch source for an encoded split: ``fit`` asks it for each epoch's batches.

    With ``world_size`` > 1 the epoch's plan is made for the global batch
    (``batch_size * world_size``) on every rank alike, and each rank takes its share of each
    global batch: together the ranks see exactly what one process with the global batch sees.
    """

    data: Encoded
    collator: Collator
    batch_size: int
    seed: int
    group_by_length: bool = True
    rank: int = 0
    world_size: int = 1
    _lengths: list[int] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self._lengths = self.data.lengths

    def _plan(self, epoch: int) -> list[list[int]]:
        plan = epoch_batches(
            self._lengths, self.batch_size * self.world_size, seed=self.seed, epoch=epoch,
            group_by_length=self.group_by_length,
        )
        # A last global batch too small to give every rank a sample is dropped on all ranks.
        return [b for b in plan if len(b) >= self.world_size]

    def padded_length(self) -> int:
        """The length the first epoch's batches are padded to, their median: the longest row's
        of each, or the collator's fixed length."""
        fixed = int(getattr(self.collator, "fixed_length", 0) or 0)
        if fixed:
            return fixed
        longest = sorted(max(self._lengths[i] for i in b) for b in self._plan(0) if b)
        return longest[len(longest) // 2] if longest else 0

    def num_batches(self, epoch: int) -> int:
        if self.world_size == 1:
            return -(-len(self.data) // self.batch_size)
        return len(self._plan(epoch))

    def iterate(self, epoch: int, start: int = 0) -> Iterator[dict[str, torch.Tensor]]:
        for batch in self._plan(epoch)[start:]:
            yield self.collator(self.data, shard(batch, self.rank, self.world_size))
