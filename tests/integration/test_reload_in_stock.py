"""A classifier cpuft trained, saved and loaded back by stock transformers, gives the logits of
the model cpuft held in memory: every speed-up's patch leaves the saved weights those of the
plain architecture."""

import pytest
import torch

from cpuft.config import config_from
from cpuft.engine.fit import fit
from cpuft.engine.step import autocast_for
from cpuft.job.build import build_run
from cpuft.runtime import preview
from tests.helpers import make_tiny_model, sentiment_rows, write_csv


@pytest.mark.parametrize("precision", ["auto", "fp32"])
def test_stock_transformers_reloads_the_trained_classifier(tmp_path, precision):
    from transformers import AutoModelForSequenceClassification

    model_dir = make_tiny_model(tmp_path / "tiny")
    data = write_csv(tmp_path / "train.csv", sentiment_rows(96))
    cfg = config_from({"model": str(model_dir), "train_file": str(data),
                       "text_columns": ["text"], "batch_size": 8, "max_steps": 6, "lr": 5e-3,
                       "precision": precision, "progress": False, "compile": "off"})
    run = build_run(cfg, preview(cfg))
    fit(run.task.model, run.source, run.fit_config())
    run.task.save(run.task.model, tmp_path / "out")

    batch = next(run.source.iterate(0))
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    ours = run.task.model.eval()
    stock = AutoModelForSequenceClassification.from_pretrained(tmp_path / "out").eval()
    untrained = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    with torch.no_grad(), autocast_for("fp32"):
        held, reloaded, before = (m(**inputs).logits for m in (ours, stock, untrained))
    assert next(stock.parameters()).dtype == torch.float32
    torch.testing.assert_close(reloaded, held, atol=1e-5, rtol=1e-4)
    assert not torch.allclose(reloaded, before, atol=1e-3)  # trained, not the initial weights
    assert stock.config.id2label == ours.config.id2label
