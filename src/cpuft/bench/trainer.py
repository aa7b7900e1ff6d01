"""HF Trainer as the stock way to fine-tune, set up as a user would, for every benchmark model:
the precision rule, the step timer and cpuft's batches."""

from __future__ import annotations

import itertools
import time
from typing import Any

from cpuft.data.batching import epoch_batches
from cpuft.runtime import preview


def trainer_best_precision() -> tuple[str, str]:
    """bf16 where native and faster: the same measured rule as cpuft's, so that neither side
    loses by a precision that is slower on this CPU."""
    plan = preview()
    return str(plan.precision), plan.precision_reason


def step_times() -> Any:
    """A Trainer callback whose ``marks`` are the start of the first step and the end of each;
    their differences are the step times."""
    from transformers import TrainerCallback

    class StepTimes(TrainerCallback):
        def __init__(self) -> None:
            self.marks: list[float] = []

        def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
            if not self.marks:
                self.marks.append(time.perf_counter())

        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            self.marks.append(time.perf_counter())

    return StepTimes()


def same_batches_trainer(lengths: list[int], batch_size: int, seed: int) -> Any:
    """transformers' Trainer taking cpuft's length-grouped batches, in cpuft's order.

    Both samplers group by length in mega-batches of 50 batches, but each orders the epoch its
    own way, so over part of an epoch their measured steps would hold different samples: in a
    ``--quick`` run of bert-base size (10 measured steps of 8), trainer-best's held 39.6 tokens
    a sample against cpuft's 29.4. With the same batches, both configurations do the same work.
    """
    from torch.utils.data import DataLoader
    from transformers import Trainer

    batches = epoch_batches(lengths, batch_size, seed=seed, epoch=0)

    class SameBatches(Trainer):
        def get_train_dataloader(self) -> Any:
            loader = DataLoader(self.train_dataset,  # type: ignore[arg-type]
                                batch_sampler=batches, collate_fn=self.data_collator,
                                num_workers=0)
            return self.accelerator.prepare(loader)

    return SameBatches


def trainer_args(output_dir: str, *, precision: str, stock: bool, batch_size: int, steps: int,
                 lr: float, weight_decay: float, seed: int, compile: bool = False) -> Any:
    """TrainingArguments for CPU: 2021's (fp32, unfused AdamW, random batches) when ``stock``,
    else today's best flags; with ``compile``, ``torch_compile=True`` too."""
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=output_dir,
        use_cpu=True,
        bf16=precision == "bf16",
        optim="adamw_torch" if stock else "adamw_torch_fused",
        train_sampling_strategy="random" if stock else "group_by_length",
        per_device_train_batch_size=batch_size,
        max_steps=steps,
        learning_rate=lr,
        weight_decay=weight_decay,
        warmup_steps=0,
        seed=seed,
        save_strategy="no",
        logging_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
        torch_compile=compile,
    )


def seconds_between(marks: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(marks)]
