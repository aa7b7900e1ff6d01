"""cpuft.fit on a DataLoader: training, checkpoints and exact resume."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import cpuft
from cpuft.errors import CpuftError


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 2))


def _loader() -> DataLoader:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(96, 8, generator=g)
    return DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=16, shuffle=True)


def _params(model: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


SETTINGS = {"lr": 1e-2, "precision": "fp32", "progress": False, "seed": 3, "log_steps": 1,
            "lr_schedule": "constant", "warmup_ratio": 0.0}  # both legs: one schedule


def test_fit_trains_on_a_dataloader_and_resumes_exactly(tmp_path: Path,
                                                         said: list[str]) -> None:
    whole = _model()
    result = cpuft.fit(whole, _loader(), criterion=nn.functional.cross_entropy, max_steps=9,
                       **SETTINGS)
    assert result.steps == 9 and result.losses[-1] < result.losses[0]

    out = tmp_path / "run"
    first = _model()
    cpuft.fit(first, _loader(), criterion=nn.functional.cross_entropy, max_steps=4,
              output_dir=str(out), save_steps=4, **SETTINGS)
    assert (out / "checkpoint-4").is_dir()
    said.clear()
    resumed = _model()
    cpuft.fit(resumed, _loader(), criterion=nn.functional.cross_entropy, max_steps=9,
              output_dir=str(out), resume=True, **SETTINGS)
    # Epoch 0 (6 batches) stopped at batch 4: its order is seeded, so skipping repeats it.
    assert said == ["resuming: drawing the 4 batch(es) of epoch 0 already trained to skip them "
                    "(the data cannot seek)"]
    for a, b in zip(_params(resumed), _params(whole), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()
             if '"step"' in line]
    assert steps == list(range(1, 10))  # the first leg's records kept, none twice


def test_dict_batches_use_the_models_own_loss() -> None:
    class WithLoss(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(4, 1)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> SimpleNamespace:
            return SimpleNamespace(loss=nn.functional.mse_loss(self.linear(x).squeeze(-1), y))

    batches = [{"x": torch.randn(8, 4), "y": torch.randn(8)} for _ in range(5)]
    assert cpuft.fit(WithLoss(), batches, max_steps=5, **SETTINGS).steps == 5


def test_bad_settings_and_data_say_so_in_one_line() -> None:
    with pytest.raises(CpuftError, match="unknown setting 'learning_rate'"):
        cpuft.fit(_model(), _loader(), learning_rate=1.0)
    with pytest.raises(CpuftError, match=r"lora_r is a cpuft train setting that cpuft\.fit "
                       "does not read"):
        cpuft.fit(_model(), _loader(), lora_r=16, **SETTINGS)
    with pytest.raises(CpuftError, match="batch_size is a cpuft train setting"):
        cpuft.fit(_model(), _loader(), batch_size=16, **SETTINGS)
    with pytest.raises(CpuftError, match="the data has no length: pass max_steps"):
        cpuft.fit(_model(), iter([]), criterion=nn.functional.cross_entropy, **SETTINGS)
    with pytest.raises(CpuftError, match="the data ran out before max_steps"):
        cpuft.fit(_model(), iter(list(_loader())[:2]), criterion=nn.functional.cross_entropy,
                  max_steps=5, **SETTINGS)
    with pytest.raises(CpuftError, match="resume=True needs the output_dir"):
        cpuft.fit(_model(), _loader(), resume=True, **SETTINGS)
    with pytest.raises(CpuftError, match="the data gives Tensor batches: give criterion="):
        cpuft.fit(_model(), [torch.randn(4, 8)], max_steps=1, **SETTINGS)
    with pytest.raises(CpuftError, match=r"criterion= takes \(input, target\) batches, not a "
                                         "tuple of 3"):
        cpuft.fit(_model(), [(torch.randn(4, 8),) * 3], max_steps=1,
                  criterion=nn.functional.cross_entropy, **SETTINGS)


def test_a_source_that_seeks_resumes_without_drawing_again(tmp_path: Path,
                                                            said: list[str]) -> None:
    class Seeking:
        """Epochs of 5 batches that start anywhere (as cpuft's own batch sources do)."""

        def __init__(self) -> None:
            self.starts: list[tuple[int, int]] = []

        def num_batches(self, epoch: int) -> int:
            return 5

        def iterate(self, epoch: int, start: int = 0):
            self.starts.append((epoch, start))
            g = torch.Generator().manual_seed(epoch)
            batches = [(torch.randn(8, 8, generator=g), torch.randint(0, 2, (8,), generator=g))
                       for _ in range(5)]
            yield from batches[start:]

    out = tmp_path / "run"
    cpuft.fit(_model(), Seeking(), criterion=nn.functional.cross_entropy, max_steps=3,
              output_dir=str(out), save_steps=3, **SETTINGS)
    source = Seeking()
    said.clear()
    cpuft.fit(_model(), source, criterion=nn.functional.cross_entropy, max_steps=7,
              output_dir=str(out), resume=True, **SETTINGS)
    assert source.starts == [(0, 3), (1, 0)] and said == []


def test_loss_fn_gets_the_loaders_own_batch() -> None:
    seen: list[type] = []

    def loss_fn(model: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
        seen.append(type(batch))
        x, y = batch  # a DataLoader of a TensorDataset yields [x, y]
        return nn.functional.cross_entropy(model(x), y)

    result = cpuft.fit(_model(), _loader(), loss_fn=loss_fn, max_steps=3, **SETTINGS)
    assert result.steps == 3 and result.samples == 48 and seen == [list] * 3
    nested = [{"pair": (torch.randn(4, 8), torch.randint(0, 2, (4,)))} for _ in range(2)]
    result = cpuft.fit(_model(), nested, max_steps=2, **SETTINGS,
                       loss_fn=lambda m, b: nn.functional.cross_entropy(m(b["pair"][0]),
                                                                        b["pair"][1]))
    assert result.samples == 8


def test_evaluate_every_n_steps_and_the_best_model_at_the_end(tmp_path: Path) -> None:
    model, held_out = _model(), list(_loader())[:2]
    weights: list[list[torch.Tensor]] = []

    def evaluate(m: nn.Module) -> dict[str, float]:
        assert not m.training
        weights.append(_params(m))
        with torch.no_grad():
            right = sum(int((m(x).argmax(-1) == y).sum()) for x, y in held_out)
        return {"accuracy": [0.6, 0.9, 0.7][len(weights) - 1], "seen": float(right)}

    result = cpuft.fit(model, _loader(), criterion=nn.functional.cross_entropy, max_steps=6,
                       evaluate=evaluate, eval_steps=2, load_best_model_at_end=True,
                       metric_for_best_model="eval_accuracy", output_dir=tmp_path / "run",
                       **SETTINGS)
    assert [e["step"] for e in result.evaluations] == [2, 4, 6]
    assert result.best == {"step": 4, "value": 0.9, "metric": "accuracy"}
    for now, best in zip(_params(model), weights[1], strict=True):
        assert torch.equal(now, best)
    with pytest.raises(CpuftError, match="eval_steps needs evaluate="):
        cpuft.fit(_model(), _loader(), criterion=nn.functional.cross_entropy, max_steps=2,
                  eval_steps=1, **SETTINGS)


def test_the_typed_settings_are_the_settings_fit_reads() -> None:
    import typing

    from cpuft.api.fit import NOT_READ
    from cpuft.api.fit_settings import FitSettings
    from cpuft.config.fields import settings

    read = {name: s for name, s in settings().items()
            if not (s.recipe or name in NOT_READ or s.section in ("model", "data"))}
    hints = typing.get_type_hints(FitSettings)
    assert set(hints) == set(read)
    for name, s in read.items():
        hint = hints[name]
        if s.choices:
            parts = typing.get_args(hint) if typing.get_origin(hint) is not typing.Literal \
                else (hint,)  # resume: bool | Literal[...]
            values = {v for part in parts if typing.get_origin(part) is typing.Literal
                      for v in typing.get_args(part)}
            assert values == set(s.choices), name
        elif name == "output_dir":
            assert str in typing.get_args(hint)
        else:
            assert hint is s.kind, name
