"""cpuft's default update is torch's AdamW on every parameter, as HF Trainer makes it: the same
decay groups, clipping and schedule, the word embedding's unused rows included (its gradient
comes as the rows a batch used, from which cpuft makes the dense step)."""

import torch

from cpuft.config import config_from
from cpuft.engine.fit import fit
from cpuft.job.build import build_run
from cpuft.runtime import preview
from tests.helpers import make_tiny_model, sentiment_rows, write_csv


def trainer_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, object]]:
    """HF Trainer's groups: no decay for biases and LayerNorm weights."""
    named = list(model.named_parameters())
    plain = [p for n, p in named if "bias" in n or "LayerNorm" in n]
    ids = {id(p) for p in plain}
    return [{"params": [p for _, p in named if id(p) not in ids], "weight_decay": weight_decay},
            {"params": plain, "weight_decay": 0.0}]


def test_two_default_steps_are_torchs_adamw_on_every_parameter(tmp_path):
    from transformers import AutoModelForSequenceClassification

    model_dir = make_tiny_model(tmp_path / "tiny", dropout=0.0)
    data = write_csv(tmp_path / "train.csv", sentiment_rows(64))
    cfg = config_from({"model": str(model_dir), "train_file": str(data),
                       "text_columns": ["text"], "batch_size": 8, "max_steps": 2, "lr": 1e-2,
                       "weight_decay": 0.5, "lr_schedule": "constant", "warmup_ratio": 0.0,
                       "precision": "fp32", "progress": False, "compile": "off"})
    run = build_run(cfg, preview(cfg))
    assert not run.plan.speedups["sparse_embeddings"].on
    # the word embedding's gradient comes as rows; the row kernel makes the dense step of them
    assert run.plan.speedups["embedding_rows"].on
    assert run.task.model.get_input_embeddings().sparse
    batches = [dict(b) for b, _ in zip(run.source.iterate(0), range(2), strict=False)]

    stock = AutoModelForSequenceClassification.from_pretrained(model_dir)
    optimizer = torch.optim.AdamW(trainer_groups(stock, 0.5), lr=1e-2)
    for batch in batches:
        stock(**batch).loss.backward()
        torch.nn.utils.clip_grad_norm_(stock.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()

    fit(run.task.model, run.source, run.fit_config())
    ours = dict(run.task.model.named_parameters())
    used = torch.cat([b["input_ids"].flatten() for b in batches]).unique()
    word = stock.get_input_embeddings().weight
    # Some rows no batch used: AdamW decays them (by 0.5% a step here), a lazy update does not.
    assert len(used) < word.shape[0]
    for name, p in stock.named_parameters():
        torch.testing.assert_close(ours[name].detach(), p.detach(), atol=1e-5, rtol=1e-4,
                                   msg=lambda m, name=name: f"{name}: {m}")
