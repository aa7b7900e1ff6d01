"""Seeded subsets of a split (``--max-train-samples``, ``--max-eval-samples``): the same rows
for every run of the same data, in their original order."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")
SUBSET_SEED = 20211


def seeded_subset(items: Sequence[T], limit: int) -> list[T]:
    """``limit`` of ``items`` drawn with a fixed seed; all of them when ``limit`` is 0 or not
    fewer."""
    if not limit or len(items) <= limit:
        return list(items)
    picked = sorted(random.Random(SUBSET_SEED).sample(range(len(items)), limit))
    return [items[i] for i in picked]
