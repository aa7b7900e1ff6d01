"""HF TrainingArguments' flags that have no cpuft setting of their own, so that an HF command
line runs as typed: each is taken with HF's meaning as cpuft's settings, accepted where cpuft
has nothing to change, or refused in one line that says why (docs/hf-trainer.md)."""

from __future__ import annotations

import argparse
from typing import Any

from cpuft.cli.numbers import finite_float
from cpuft.config.sections import LOWER_IS_BETTER
from cpuft.errors import CpuftError

ADAMW = ("adamw_torch", "adamw_torch_fused")
"""HF's ``--optim`` names of the update cpuft makes: torch's AdamW (cpuft's fused kernels make
the same update as either)."""
HF_STEPS = 500
"""TrainingArguments' save_steps and logging_steps where a strategy of steps comes without
them (its eval_steps default to logging_steps)."""


def truth(text: str) -> bool:
    """An argparse type: HF's spellings of a boolean."""
    value = text.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not true or false")


def add_hf_only_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "HF Trainer's flags without a cpuft name (their meaning: docs/hf-trainer.md)",
        argument_default=argparse.SUPPRESS)
    for name, what in (("--do_train", "cpuft train trains"),
                       ("--do_eval", "the validation data is scored once training ends"),
                       ("--do_predict", "the test data is scored once training ends"),
                       ("--use_cpu", "cpuft runs on CPUs"), ("--no_cuda", "cpuft runs on CPUs")):
        group.add_argument(name, dest=f"hf_{name[2:]}", action="store_true",
                           help=f"accepted: {what}")
    group.add_argument("--dataloader_num_workers", dest="hf_dataloader_num_workers", type=int,
                       metavar="N", help="accepted: batches are tokenized once, before "
                       "training, and need no workers")
    group.add_argument("--eval_strategy", "--evaluation_strategy", dest="hf_eval_strategy",
                       choices=("no", "steps", "epoch"), help="no: once training ends; "
                       f"steps: every --eval_steps (default: --logging_steps, else {HF_STEPS})")
    group.add_argument("--save_strategy", dest="hf_save_strategy",
                       choices=("no", "steps", "epoch", "best"), help="no: no checkpoint "
                       f"while training; steps: every --save_steps (default {HF_STEPS})")
    group.add_argument("--logging_strategy", dest="hf_logging_strategy",
                       choices=("no", "steps", "epoch"), help="steps: every --logging_steps")
    group.add_argument("--warmup_steps", dest="hf_warmup_steps", type=finite_float,
                       metavar="N", help="steps of warm-up; under 1, HF 5's share of all "
                       "steps (--warmup-ratio)")
    group.add_argument("--optim", dest="hf_optim", metavar="NAME",
                       help=f"{' or '.join(ADAMW)}: AdamW, cpuft's update")
    group.add_argument("--greater_is_better", dest="hf_greater_is_better", type=truth,
                       metavar="BOOL", help="checked against --metric_for_best_model's "
                       "direction, which cpuft takes from its name")
    group.add_argument("--label_names", dest="hf_label_names", nargs="+", metavar="NAME",
                       help="labels: what cpuft's batches call them")


def hf_only_settings(args: argparse.Namespace, given: dict[str, Any]) -> dict[str, Any]:
    """cpuft's settings that the HF-only flags in ``args`` give, over the settings ``given``
    on the command line; a flag cpuft cannot honour raises CpuftError."""
    hf = {k.removeprefix("hf_"): v for k, v in vars(args).items() if k.startswith("hf_")}
    changes: dict[str, Any] = {}
    if given.get("max_steps") == -1:  # HF's "no limit": train by --num_train_epochs
        changes["max_steps"] = 0
    changes |= _strategies(hf, given)
    warmup = hf.get("warmup_steps")
    if warmup is not None:
        changes |= _warmup(warmup)
    optim = hf.get("optim")
    if optim is not None and optim not in ADAMW:
        raise CpuftError(f"--optim {optim}: cpuft trains with AdamW ({', '.join(ADAMW)})")
    labels = hf.get("label_names")
    if labels is not None and labels != ["labels"]:
        raise CpuftError(f"--label_names {' '.join(labels)}: cpuft's batches call the labels "
                         "'labels'; the data's label column is --label-column")
    greater = hf.get("greater_is_better")
    metric = str(given.get("metric_for_best_model", "")).removeprefix("eval_")
    if greater is not None and metric and greater == metric.endswith(LOWER_IS_BETTER):
        raise CpuftError(f"--greater_is_better {str(greater).lower()} with "
                         f"--metric_for_best_model {metric}: cpuft takes the direction from "
                         f"the name, and {metric} is {'lower' if greater else 'higher'} is "
                         "better")
    return changes


def _warmup(steps: float) -> dict[str, Any]:
    """--warmup_steps as HF 5 reads it: a share of all steps under 1, else a count."""
    if 0 <= steps < 1:
        return {"warmup_ratio": steps, "warmup_steps": 0}
    if steps != int(steps):
        raise CpuftError(f"--warmup_steps {steps:g}: a whole number of steps, or a share "
                         "under 1")
    return {"warmup_steps": int(steps)}


def _strategies(hf: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """The settings --eval_strategy, --save_strategy and --logging_strategy give."""
    by_epoch = "cpuft counts by steps: give {0} steps with {1} N"
    changes: dict[str, Any] = {}
    evaluate = hf.get("eval_strategy")
    if evaluate == "epoch":
        raise CpuftError("--eval_strategy epoch: " + by_epoch.format("--eval_strategy",
                                                                    "--eval_steps"))
    if evaluate == "no":
        changes["eval_steps"] = 0
    elif evaluate == "steps" and not given.get("eval_steps"):
        changes["eval_steps"] = given.get("log_steps", HF_STEPS)
    save = hf.get("save_strategy")
    if save in ("epoch", "best"):
        raise CpuftError(f"--save_strategy {save}: " + by_epoch.format("--save_strategy",
                                                                      "--save_steps"))
    if save == "no":
        changes["save_steps"] = 0
    elif save == "steps" and not given.get("save_steps"):
        changes["save_steps"] = HF_STEPS
    logging = hf.get("logging_strategy")
    if logging in ("no", "epoch"):
        raise CpuftError(f"--logging_strategy {logging}: cpuft logs to metrics.jsonl every "
                         "--logging_steps steps; drop the flag or give it steps")
    return changes
