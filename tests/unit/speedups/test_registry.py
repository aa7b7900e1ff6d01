"""A speed-up is one module and one registration: a toy one, registered here, is decided from
the settings and the machine, applied to the model and recorded with its reason, by cpuft
train and by loops of one's own, without a line of cpuft changed."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import cpuft
from cpuft.cli.main import main
from cpuft.config import TrainConfig
from cpuft.speedplan.speed_plan import Decision
from cpuft.speedups import registry
from cpuft.speedups.registry import PatchContext, SpeedUp, register
from cpuft.topology import Topology
from tests.helpers import sentiment_rows, write_csv


class TaggedLinears(SpeedUp):
    """Tags every nn.Linear; on where the batch is at least 8, a decision of the settings and
    the machine."""

    name = "tagged_linears"

    def decide(self, cfg: TrainConfig, topo: Topology) -> Decision:
        if cfg.optimization.batch_size < 8:
            return Decision(False, "batches under 8 samples")
        return Decision(True, f"batches of {cfg.optimization.batch_size} on "
                              f"{len(topo.first_thread_per_core())} core(s)")

    def apply(self, model: nn.Module, decision: Decision, ctx: PatchContext) -> Decision:
        linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
        if not linears:
            return Decision(False, "no nn.Linear to tag")
        for m in linears:
            m.cpuft_tagged = ctx.precision  # type: ignore[assignment]
        return Decision(True, f"{decision.reason}; {len(linears)} tagged")


class RecipesOnly(TaggedLinears):
    name = "recipes_only"
    own_loops = "off in a loop of your own: a toy for recipes"


@pytest.fixture
def toys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry.registered()))
    register(TaggedLinears())
    register(RecipesOnly())


def test_cpuft_train_decides_applies_and_records_a_registered_speed_up(toys, tiny_model,
                                                                       tmp_path):
    data = write_csv(tmp_path / "reviews.csv", sentiment_rows(24))
    out = tmp_path / "run"
    argv = ["train", "--model", str(tiny_model), "--train-file", str(data), "--text-columns",
            "text", "--max-steps", "1", "--no-progress", "--precision", "fp32",
            "--output-dir", str(out)]
    assert main([*argv, "--batch-size", "8"]) == 0
    speedups = json.loads((out / "summary.json").read_text())["speedups"]
    assert speedups["tagged_linears"] is True
    assert speedups["tagged_linears_reason"].startswith("batches of 8 on ")
    assert speedups["tagged_linears_reason"].endswith(" tagged")
    assert speedups["recipes_only"] is True
    assert speedups["fast_dropout"] is True  # cpuft's own still there

    assert main([*argv, "--batch-size", "4", "--overwrite"]) == 0
    speedups = json.loads((out / "summary.json").read_text())["speedups"]
    assert (speedups["tagged_linears"], speedups["tagged_linears_reason"]) == \
        (False, "batches under 8 samples")


def test_loops_of_ones_own_get_it_unless_it_says_otherwise(toys):
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    cpuft.optimize(model, torch.optim.AdamW(model.parameters()), precision="fp32")
    plan = cpuft.report_plan(model)
    assert plan["tagged_linears"] is True and plan["tagged_linears_reason"].endswith("2 tagged")
    assert all(m.cpuft_tagged == "fp32" for m in model if isinstance(m, nn.Linear))
    assert (plan["recipes_only"], plan["recipes_only_reason"]) == \
        (False, "off in a loop of your own: a toy for recipes")

    without = nn.Sequential(nn.Conv1d(1, 1, 3))
    cpuft.optimize(without, precision="fp32")
    assert cpuft.report_plan(without)["tagged_linears_reason"] == "no nn.Linear to tag"


def test_cpuft_own_speed_ups_are_registered_in_patching_order():
    assert list(registry.registered())[:11] == [
        "fast_dropout", "attention", "sparse_embeddings", "embedding_rows", "first_token_layer",
        "counted_logits", "fused_gelu", "relative_span", "dynamic_conv", "channels_last",
        "bf16_weights"]
