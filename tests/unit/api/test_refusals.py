"""What a program hands cpuft.fit and cpuft.optimize that cannot work is refused before
training, in one CpuftError (a ValueError; a TypeError too for a wrong type) naming the argument
and what to do, as the command line refuses a bad flag."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

import cpuft
from cpuft.errors import CpuftError, CpuftTypeError

QUIET = {"progress": False, "precision": "fp32", "log_steps": 1}


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def _pairs(n: int = 6) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(8, 4, generator=g), torch.randint(0, 2, (8,), generator=g))
            for _ in range(n)]


CE = nn.functional.cross_entropy


def _fit(model=None, data=None, **kwargs):
    return cpuft.fit(_model() if model is None else model, _pairs() if data is None else data,
                     **{**QUIET, **kwargs})


@pytest.mark.parametrize("call, error, phrase", [
    (lambda: _fit(model="bert"), CpuftTypeError, "model must be a torch.nn.Module, not str"),
    (lambda: _fit(model=nn.ReLU(), criterion=CE), CpuftError, "has no parameters to train"),
    (lambda: _fit(max_steps=2), CpuftError,
     "give criterion=(output, target) -> loss for (input, target) pairs"),
    (lambda: _fit(loss_fn=lambda m, b: None, max_steps=2), CpuftError,
     "loss_fn must give a tensor of one value, not NoneType"),
    (lambda: _fit(loss_fn=lambda m, b: m(b[0]).sum(0), max_steps=2), CpuftError,
     "loss_fn must give a tensor of one value, not Tensor of shape (2,)"),
    (lambda: _fit(criterion=CE, grad_accum=0), CpuftError, "grad_accum must be positive"),
    (lambda: _fit(criterion=CE, max_steps=-3), CpuftError, "max_steps must be 0 or positive"),
    (lambda: _fit(criterion=CE, lr=-1.0), CpuftError, "lr must be positive"),
    (lambda: _fit(criterion=CE, lr=math.nan), CpuftError, "lr must be a finite number"),
    (lambda: _fit(criterion=CE, lr="fast"), CpuftTypeError, "setting lr: expected float"),
    (lambda: _fit(criterion=CE, lr=1e12, max_steps=6), CpuftError,
     ": lower lr (now 1e+12)"),
    (lambda: cpuft.optimize(_model(), torch.optim.AdamW(_model().parameters())), CpuftError,
     "the optimizer holds none of the model's parameters"),
    (lambda: cpuft.optimize(_model(), "adamw"), CpuftTypeError,
     "optimizer must be a torch.optim.Optimizer, not str"),
])
def test_a_call_that_cannot_work_is_one_error_naming_the_argument(call, error, phrase):
    with pytest.raises(error) as caught:
        call()
    assert phrase in str(caught.value) and len(str(caught.value).splitlines()) == 1
    assert isinstance(caught.value, ValueError)
    if error is CpuftTypeError:
        assert isinstance(caught.value, TypeError)


def test_fit_writes_into_another_runs_folder_only_when_told(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _fit(criterion=CE, max_steps=4, output_dir=str(out), save_steps=4)
    assert (out / "checkpoint-4").is_dir()
    with pytest.raises(CpuftError, match="holds another run: pass overwrite=True"):
        _fit(criterion=CE, max_steps=2, output_dir=str(out))
    assert (out / "checkpoint-4").is_dir()  # untouched
    _fit(criterion=CE, max_steps=2, output_dir=str(out), overwrite=True)
    assert (out / "checkpoint-2").is_dir() and not (out / "checkpoint-4").exists()
    assert not list(tmp_path.glob(".run.previous-*"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(CpuftError, match=r"output_dir .*file is a file"):
        _fit(criterion=CE, max_steps=2, output_dir=str(tmp_path / "file"))


def test_resuming_with_another_model_says_so(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _fit(criterion=CE, max_steps=2, output_dir=str(out))
    wider = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    with pytest.raises(CpuftError, match="the checkpoint does not fit this model"):
        _fit(model=wider, criterion=CE, max_steps=4, output_dir=str(out), resume=True)
