"""A Hugging Face Trainer script under `cpuft launch` on 2 ranks trains as one DDP job: on a
CPU-only torch, accelerate makes one only where it is told to use the CPU."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import cpuft_env, free_port, make_tiny_model

pytestmark = pytest.mark.multiprocess

TRAINER_SCRIPT = '''
import hashlib, json, sys
import torch
from transformers import (AutoModelForSequenceClassification, HfArgumentParser, Trainer,
                          TrainingArguments)

model_dir, with_cpuft = sys.argv[1], sys.argv[2] == "cpuft"
(args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(sys.argv[3:])
model = AutoModelForSequenceClassification.from_pretrained(model_dir)
torch.manual_seed(0)
rows = [{"input_ids": torch.randint(5, 20, (6,)), "labels": torch.tensor(i % 2)}
        for i in range(64)]
optimizers = (None, None)
plan = {}
if with_cpuft:  # docs/hf-trainer.md's lines
    import cpuft
    from cpuft.optim import param_groups

    optimizer = torch.optim.AdamW(param_groups(model, args.weight_decay), lr=args.learning_rate)
    model, optimizer = cpuft.optimize(model, optimizer)
    optimizers = (optimizer, None)
    plan = cpuft.report_plan(model)
trainer = Trainer(model=model, args=args, train_dataset=rows, optimizers=optimizers)
trainer.train()
weights = b"".join(p.detach().float().numpy().tobytes() for p in model.parameters())
print("RESULT " + json.dumps({
    "rank": args.process_index, "world": args.world_size, "mode": str(args.parallel_mode),
    "global_batch": trainer.state.train_batch_size * args.world_size,
    "steps": trainer.state.global_step, "fused": plan.get("fused_optimizer"),
    "weights": hashlib.sha256(weights).hexdigest()}), flush=True)
trainer.save_model(args.output_dir)
'''


@pytest.mark.parametrize("way", ["stock", "cpuft"])
def test_a_trainer_script_on_two_ranks_trains_as_one_ddp_job(tmp_path: Path, way: str) -> None:
    """An HF command line as typed (no --use_cpu); with the documented lines, cpuft's step
    inside the same DDP job."""
    model = make_tiny_model(tmp_path / "model", dropout=0.0)
    (tmp_path / "train.py").write_text(TRAINER_SCRIPT)
    env = {k: v for k, v in cpuft_env().items() if not k.startswith("ACCELERATE_")}
    hf = ["--output_dir", str(tmp_path / "out"), "--per_device_train_batch_size", "4",
          "--max_steps", "3", "--learning_rate", "1e-2", "--report_to", "none",
          "--save_strategy", "no", "--logging_strategy", "no", "--disable_tqdm", "true",
          "--seed", "0"]
    proc = subprocess.run(
        [sys.executable, "-m", "cpuft", "launch", "--nproc-per-node", "2", "--master-port",
         str(free_port()), "--", "python", "train.py", str(model), way, *hf],
        cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = sorted((json.loads(found) for found in
                      re.findall(r"RESULT (\{[^{}]*\})", proc.stdout)), key=lambda r: r["rank"])
    assert [r["rank"] for r in results] == [0, 1], proc.stdout[-3000:]
    assert all(r["world"] == 2 and "DISTRIBUTED" in r["mode"] for r in results)
    assert all(r["global_batch"] == 8 and r["steps"] == 3 for r in results)
    assert all(r["fused"] is (True if way == "cpuft" else None) for r in results)
    # one job: DDP kept the two copies equal, and both moved from the start
    assert results[0]["weights"] == results[1]["weights"]
    assert (tmp_path / "out" / "model.safetensors").exists()
    assert "never" not in proc.stderr, proc.stderr[-2000:]
