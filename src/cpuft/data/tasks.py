"""Built-in tasks: the GLUE tasks in their standard TSV layout, and the default job's data."""

from __future__ import annotations

from dataclasses import dataclass

from cpuft.errors import CpuftError


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """Where a task's columns are and how it is scored."""

    name: str
    text_columns: tuple[str, ...]
    label_column: str
    metrics: tuple[str, ...]
    regression: bool = False
    train_file: str = "train.tsv"
    eval_file: str = "dev.tsv"
    column_names: tuple[str, ...] | None = None
    """For files without a header row (CoLA)."""


GLUE_TASKS: dict[str, TaskSpec] = {
    t.name: t
    for t in (
        TaskSpec(
            name="cola",
            text_columns=("sentence",),
            label_column="label",
            metrics=("matthews", "accuracy"),
            column_names=("source", "label", "original_label", "sentence"),
        ),
        TaskSpec(name="sst2", text_columns=("sentence",), label_column="label",
                 metrics=("accuracy",)),
        TaskSpec(name="mrpc", text_columns=("#1 String", "#2 String"), label_column="Quality",
                 metrics=("accuracy", "f1")),
        TaskSpec(name="qqp", text_columns=("question1", "question2"),
                 label_column="is_duplicate", metrics=("accuracy", "f1")),
        TaskSpec(name="stsb", text_columns=("sentence1", "sentence2"), label_column="score",
                 metrics=("pearson", "spearman"), regression=True),
        TaskSpec(name="mnli", text_columns=("sentence1", "sentence2"),
                 label_column="gold_label", metrics=("accuracy",),
                 eval_file="dev_matched.tsv"),
        TaskSpec(name="qnli", text_columns=("question", "sentence"), label_column="label",
                 metrics=("accuracy",)),
        TaskSpec(name="rte", text_columns=("sentence1", "sentence2"), label_column="label",
                 metrics=("accuracy",)),
    )
}

ROTTEN_TOMATOES = TaskSpec(
    name="rotten_tomatoes",
    text_columns=("text",),
    label_column="category",
    metrics=("accuracy", "f1"),
)
BUILTIN_TASKS = ("rotten_tomatoes", *GLUE_TASKS)


def get_task(name: str) -> TaskSpec:
    key = name.lower().replace("-", "")
    if key == "rotten_tomatoes":
        return ROTTEN_TOMATOES
    if key not in GLUE_TASKS:
        raise CpuftError(f"unknown task {name!r}: choose one of {', '.join(BUILTIN_TASKS)}")
    return GLUE_TASKS[key]
