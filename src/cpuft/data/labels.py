"""Label maps: string or integer labels to class ids, floats as regression targets."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cpuft.errors import CpuftError


@dataclass(frozen=True, slots=True)
class LabelMap:
    """Class labels in id order, or none for regression."""

    labels: tuple[Any, ...] = ()
    regression: bool = False

    @classmethod
    def infer(cls, values: Iterable[Any], regression: bool | None = None,
              where: str = "the label column") -> LabelMap:
        """Sorted distinct labels; float labels (or ``regression=True``) mean regression.
        Labels that mix numbers and words are refused: merged as text, ``1`` and ``"1"``, or a
        stray ``"pos"`` among ids, would become classes nobody meant."""
        seen = [v for v in values if v is not None]
        if not seen:
            raise CpuftError(f"{where}: the label column is empty")
        if regression is None:
            regression = any(isinstance(v, float) and not v.is_integer() for v in seen)
        if regression:
            return cls(regression=True)
        if any(isinstance(v, float) for v in seen):
            seen = [int(v) for v in seen]
        numbers = sorted({str(v) for v in seen if _is_integer(v)})
        words = sorted({str(v) for v in seen if not _is_integer(v)})
        if numbers and words:
            raise CpuftError(f"{where}: the labels mix numbers ({', '.join(numbers[:3])}) and "
                             f"words ({', '.join(words[:3])}): make them all one or the other")
        if len({type(v) for v in seen}) > 1:  # ids as numbers and as text: the same ids
            seen = [str(v) for v in seen]
        labels = tuple(sorted(set(seen)))
        if len(labels) < 2:
            raise CpuftError(f"{where} has one class ({labels[0]!r}): nothing to learn; "
                             "give rows of at least two classes")
        return cls(labels=labels)

    @property
    def num_labels(self) -> int:
        return 1 if self.regression else len(self.labels)

    def encode(self, values: Sequence[Any], where: str) -> list[Any]:
        """Class ids (or floats); a label the map does not know is an error naming it."""
        if self.regression:
            try:
                out = [float(v) for v in values]
            except (TypeError, ValueError):
                raise CpuftError(f"{where}: regression labels must be numbers") from None
            if any(math.isnan(v) for v in out):
                raise CpuftError(f"{where}: a regression label is missing")
            return out
        index = {label: i for i, label in enumerate(self.labels)}
        as_str = isinstance(self.labels[0], str)
        ids = []
        for row, v in enumerate(values):
            key: Any = v
            if isinstance(v, float) and v.is_integer():
                key = int(v)
            if as_str and not isinstance(key, str):
                key = str(key)
            if key not in index:
                raise CpuftError(
                    f"{where}: row {row + 1} has label {v!r}, which the training data does not "
                    f"have (known: {', '.join(map(str, self.labels))})"
                )
            ids.append(index[key])
        return ids

    def id2label(self) -> dict[int, str]:
        return {i: str(label) for i, label in enumerate(self.labels)}

    def to_json(self) -> dict[str, Any]:
        return {"regression": self.regression, "labels": list(self.labels)}

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> LabelMap:
        data = json.loads(path.read_text())
        return cls(labels=tuple(data["labels"]), regression=bool(data["regression"]))


def _is_integer(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, str) and value.strip().lstrip("+-").isdigit()
