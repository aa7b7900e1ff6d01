"""cpuft's speed inside an HF Trainer script, through Trainer's own ``optimizers=``: the lines
docs/hf-trainer.md gives train what the stock Trainer trains, with cpuft's fused step."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.helpers import ZERO_GRADIENT, make_tiny_model


def trained(model_dir: Path, out: Path, with_cpuft: bool) -> tuple[dict, dict | None]:
    from transformers import AutoModelForSequenceClassification, Trainer, TrainingArguments

    import cpuft
    from cpuft.optim import param_groups

    model = AutoModelForSequenceClassification.from_pretrained(model_dir)
    gen = torch.Generator().manual_seed(0)
    rows = [{"input_ids": torch.randint(5, 20, (6,), generator=gen), "labels": torch.tensor(i % 2)}
            for i in range(48)]
    args = TrainingArguments(output_dir=str(out), per_device_train_batch_size=8, max_steps=4,
                             learning_rate=1e-2, weight_decay=0.1, report_to="none",
                             save_strategy="no", logging_strategy="no", disable_tqdm=True,
                             seed=0, use_cpu=True)
    optimizers: tuple = (None, None)
    if with_cpuft:  # the documented lines
        optimizer = torch.optim.AdamW(param_groups(model, args.weight_decay),
                                      lr=args.learning_rate)
        model, optimizer = cpuft.optimize(model, optimizer, precision="fp32")
        optimizers = (optimizer, None)
    Trainer(model=model, args=args, train_dataset=rows, optimizers=optimizers).train()
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    return weights, cpuft.report_plan(model) if with_cpuft else None


def test_cpuft_inside_trainer_trains_what_trainer_trains_with_its_fused_step(tmp_path):
    from transformers import AutoModelForSequenceClassification

    model_dir = make_tiny_model(tmp_path / "model", dropout=0.0, init_range=0.5)
    stock, _ = trained(model_dir, tmp_path / "stock", with_cpuft=False)
    ours, plan = trained(model_dir, tmp_path / "cpuft", with_cpuft=True)
    assert plan is not None and plan["fused_optimizer"], plan
    for name, want in stock.items():
        if ZERO_GRADIENT not in name:  # AdamW turns that gradient's rounding noise into steps
            torch.testing.assert_close(ours[name], want, atol=2e-4, rtol=1e-4, msg=name)
    start = dict(AutoModelForSequenceClassification.from_pretrained(model_dir).named_parameters())
    # both trained: the agreement is not two models standing still
    assert max(float((ours[n] - start[n]).abs().max()) for n in ours) > 1e-3
