"""From the data settings to checked, labelled splits, then to token ids."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cpuft.config import DEFAULT_TASK, ClassifierConfig, DataConfig
from cpuft.data.labels import LabelMap
from cpuft.data.tables import load_table
from cpuft.data.tasks import get_task
from cpuft.errors import CpuftError
from cpuft.log import get_logger

SPLIT_SEED = 20211

LOG = get_logger(__name__)


@dataclass(slots=True)
class LabelledSplits:
    """Raw text columns and encoded labels for train, validation and (optionally) test."""

    task: str
    text_columns: tuple[str, ...]
    label_map: LabelMap
    metrics: tuple[str, ...]
    texts: dict[str, list[tuple[str, ...]]] = field(default_factory=dict)
    labels: dict[str, list[Any]] = field(default_factory=dict)

    def size(self, split: str) -> int:
        return len(self.labels.get(split, []))


@dataclass(slots=True)
class Encoded:
    """Token ids of one split, unpadded, with labels."""

    input_ids: list[list[int]]
    labels: list[Any]
    token_type_ids: list[list[int]] | None = None

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def lengths(self) -> list[int]:
        return [len(ids) for ids in self.input_ids]


def _raw_splits(cfg: DataConfig, columns: ClassifierConfig
                ) -> tuple[str, tuple[str, ...], str, tuple[str, ...], bool | None,
                           dict[str, Any]]:
    """(task, text columns, label column, metrics, regression, raw splits) from the config."""
    if cfg.train_file:
        if cfg.task or columns.data_dir:
            raise CpuftError("give either --task/--data-dir or --train-file, not both")
        raw = {"train": _labelled_table(cfg.train_file, columns.label_column)}
        text_columns = tuple(columns.text_columns) or guess_text_columns(
            raw["train"].column_names, columns.label_column, cfg.train_file)
        if cfg.validation_file:
            raw["validation"] = _labelled_table(cfg.validation_file, columns.label_column)
        else:
            raw = _hold_out(raw["train"], cfg.validation_split, cfg.train_file)
        if cfg.test_file:
            raw["test"] = _labelled_table(cfg.test_file, columns.label_column)
        task = Path(cfg.train_file).stem
        return task, text_columns, columns.label_column, (), None, raw
    if cfg.validation_file or cfg.test_file:
        raise CpuftError("--validation-file and --test-file need --train-file")
    spec = get_task(cfg.task or DEFAULT_TASK)
    if spec.name == DEFAULT_TASK:
        from cpuft.data import rotten_tomatoes

        raw = rotten_tomatoes.load_splits()
    else:
        if not columns.data_dir:
            raise CpuftError(f"task {spec.name} needs --data-dir (a folder with its TSV files)")
        d = Path(columns.data_dir)
        if not d.is_dir():
            raise CpuftError(f"--data-dir {d}: no such folder")
        raw = {
            "train": _labelled_table(d / spec.train_file, spec.label_column, spec.column_names),
            "validation": _labelled_table(d / spec.eval_file, spec.label_column,
                                          spec.column_names),
        }
    return spec.name, spec.text_columns, spec.label_column, spec.metrics, spec.regression, raw


def guess_text_columns(names: list[str], label_column: str, path: str) -> tuple[str, ...]:
    """The text columns where --text-columns is not given, guessed as HF's run_glue.py
    guesses them (sentence1 and sentence2, else the first two columns but the label, else the
    one), a lone ``sentence`` or ``text`` column first; the guess is logged."""
    others = [n for n in names if n != label_column]
    if {"sentence1", "sentence2"} <= set(others):
        guessed: tuple[str, ...] = ("sentence1", "sentence2")
    else:
        lone = [n for n in ("sentence", "text") if n in others]
        guessed = (lone[0],) if lone else tuple(others[:2])
    if not guessed:
        raise CpuftError(f"{path}: no column but the label {label_column!r}: give "
                         "--text-columns")
    LOG.info(f"--text-columns not given: taking {', '.join(guessed)} of {path}'s columns "
             f"({', '.join(names)}), as run_glue.py guesses")
    return guessed


def _hold_out(ds: Any, share: float, path: str) -> dict[str, Any]:
    """The seeded train/validation split of one table, each part at least one row."""
    held = math.ceil(len(ds) * share)
    if len(ds) < 2 or held >= len(ds):
        raise CpuftError(f"{path}: {len(ds)} row(s) are too few to hold out a validation share "
                         f"of {share} and train on the rest: give more rows, or a "
                         "--validation-file")
    parts = ds.train_test_split(test_size=share, seed=SPLIT_SEED)
    return {"train": parts["train"], "validation": parts["test"]}


# Cells that mean "no value" in a table: read as text (so that a label "None" of a
# sentiment task is not lost), they are still no label.
MISSING_LABELS = frozenset({"nan", "na", "n/a", "null", "none", "-"})


def _labelled_table(path: str | Path, label_column: str,
                    column_names: tuple[str, ...] | None = None) -> Any:
    """A table whose every row has a label: a blank one would otherwise become a class of its
    own (or turn an integer column into floats, and classification into regression)."""
    ds = load_table(path, column_names)
    if label_column in ds.column_names:  # a missing column is reported with the others
        for row, value in enumerate(ds[label_column]):
            if value is None or (isinstance(value, float) and math.isnan(value)) \
                    or (isinstance(value, str) and value.strip().lower() in ("", *MISSING_LABELS)):
                shown = f" ({value!r})" if isinstance(value, str) and value.strip() else ""
                raise CpuftError(f"{path}: row {row + 1} has no label in column "
                                 f"{label_column!r}{shown}")
    return ds


def default_metrics(label_map: LabelMap) -> tuple[str, ...]:
    if label_map.regression:
        return ("pearson", "spearman")
    return ("accuracy", "f1") if label_map.num_labels == 2 else ("accuracy",)


def load_labelled(cfg: DataConfig, columns: ClassifierConfig | None = None) -> LabelledSplits:
    """Load every split, check its columns and labels, and encode the labels."""
    task, text_cols, label_col, metrics, regression, raw = _raw_splits(
        cfg, columns or ClassifierConfig())
    for split, ds in raw.items():
        missing = [c for c in (*text_cols, label_col) if c not in ds.column_names]
        if missing:
            raise CpuftError(
                f"{split} data has no column {missing[0]!r} (columns: {', '.join(ds.column_names)})"
            )
    held_out = "validation" in raw and not cfg.validation_file and bool(cfg.train_file)
    label_map = LabelMap.infer(raw["train"][label_col], regression=regression,
                               where="the training split" + (
                                   " (after holding out the validation rows)" if held_out else ""))
    out = LabelledSplits(
        task=task,
        text_columns=text_cols,
        label_map=label_map,
        metrics=metrics or default_metrics(label_map),
    )
    for split, ds in raw.items():
        texts = [["" if t is None else str(t) for t in ds[c]] for c in text_cols]
        out.texts[split] = list(zip(*texts, strict=True))
        out.labels[split] = label_map.encode(ds[label_col], where=f"{split} data")
    return out


def encode(texts: list[tuple[str, ...]], labels: list[Any], tokenizer: Any,
           max_length: int) -> Encoded:
    """Tokenise (one or two texts per row), truncated to ``max_length``, without padding."""
    first = [t[0] for t in texts]
    second = [t[1] for t in texts] if texts and len(texts[0]) > 1 else None
    enc = tokenizer(first, second, truncation=True, max_length=max_length)
    return Encoded(
        input_ids=enc["input_ids"],
        labels=labels,
        token_type_ids=enc.get("token_type_ids"),
    )
