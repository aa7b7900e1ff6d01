"""What the library checks of the objects a program hands it, as the command line checks its
flags: one ``CpuftError`` (a ``ValueError``; a ``CpuftTypeError``, also a ``TypeError``, for a
wrong type) naming the argument and what to do."""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import nn

from cpuft.config import TrainConfig, validate
from cpuft.errors import CpuftError, CpuftTypeError


def check_model(model: Any, caller: str) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise CpuftTypeError(f"{caller}: model must be a torch.nn.Module, not "
                             f"{type(model).__name__}")
    if not any(p.requires_grad for p in model.parameters()):
        raise CpuftError(f"{caller}: the model ({type(model).__name__}) has no parameters to "
                         "train")
    return model


def check_optimizer(optimizer: Any, model: nn.Module, caller: str) -> None:
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise CpuftTypeError(f"{caller}: optimizer must be a torch.optim.Optimizer, not "
                             f"{type(optimizer).__name__}")
    ours = {id(p) for p in model.parameters()}
    if not any(id(p) in ours for g in optimizer.param_groups for p in g["params"]):
        raise CpuftError(f"{caller}: the optimizer holds none of the model's parameters, so the "
                         "model would never change: build it over model.parameters()")


def validate_arguments(cfg: TrainConfig, caller: str) -> None:
    """The command line's checks of the settings, in the words of keyword arguments:
    ``--grad-accum must be positive`` reads ``grad_accum must be positive``."""
    try:
        validate(cfg)
    except CpuftError as e:
        raise CpuftError(f"{caller}: " + re.sub(
            r"--([a-z][a-z-]*)", lambda m: m.group(1).replace("-", "_"), str(e))) from None
