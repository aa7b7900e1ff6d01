"""The train command end to end on a tiny random-init BERT: train, resume, errors."""

import json
import math
import re
import subprocess
import sys

import pytest

from cpuft.cli.main import main
from tests.helpers import cpuft_env, sentiment_rows, train_args, write_csv


@pytest.fixture
def data_file(tmp_path):
    return write_csv(tmp_path / "reviews.csv", sentiment_rows(44, seed=2))


def losses(out):
    return [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("precision", [["--precision", "fp32"], ["--precision", "bf16"],
                                       ["--precision", "bf16", "--no-bf16-weights"]],
                         ids=["fp32", "bf16-weights", "bf16-autocast"])
def test_resume_gives_the_same_losses_as_an_uninterrupted_run(tiny_model, data_file, tmp_path,
                                                              precision):
    whole, split = tmp_path / "whole", tmp_path / "split"
    assert main(train_args(tiny_model, data_file, whole, "--max-steps", "8", *precision)) == 0
    assert main(train_args(tiny_model, data_file, split, "--max-steps", "6",
                           "--save-total-limit", "1", *precision)) == 0
    assert main(train_args(tiny_model, data_file, split, "--max-steps", "8", "--resume",
                           *precision)) == 0
    expected = losses(whole)
    assert len(expected) == 8 and len(set(expected)) > 1
    # 40 training rows in batches of 8: the resume point (step 6) is inside the second epoch.
    assert losses(split) == pytest.approx(expected, abs=1e-6)
    summary = json.loads((split / "summary.json").read_text())
    assert summary["steps"] == 8 and summary["resumed_from"] == "checkpoint-6"
    assert summary["speedups"]["bf16_weights"] is ("--no-bf16-weights" not in precision)


def test_outputs_and_summary(tiny_model, data_file, tmp_path):
    out = tmp_path / "run"
    assert main(train_args(tiny_model, data_file, out, "--max-steps", "4", "--save-steps", "2",
                           "--precision", "fp32", "--no-fused-optimizer",
                           "--save-total-limit", "2")) == 0
    summary = json.loads((out / "summary.json").read_text())
    for key in ("model", "task", "precision", "compile", "world_size", "train_samples", "steps",
                "train_seconds", "train_samples_per_second", "eval", "versions"):
        assert key in summary
    assert summary["precision"] == "fp32" and summary["speedups"]["fused_optimizer"] is False
    assert summary["speedups"]["first_token_layer"] is True  # a BERT classifier
    assert summary["steady_samples_per_second"] > 0
    assert 0.0 <= summary["eval"]["accuracy"] <= 1.0
    assert summary["world_size"] == 1 and summary["steps"] == 4
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    assert json.loads((out / "label_map.json").read_text())["labels"] == ["neg", "pos"]
    assert json.loads((out / "config.json").read_text())["id2label"] == {"0": "neg", "1": "pos"}
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    record = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert set(record) >= {"step", "loss", "lr", "samples_per_second", "tokens_per_second"}
    import torch

    state = torch.load(out / "checkpoint-4" / "state.pt", weights_only=True)
    assert state["step"] == 4


def test_tiny_model_learns(tiny_model, tmp_path):
    data = write_csv(tmp_path / "big.csv", sentiment_rows(400, seed=5))
    out = tmp_path / "learn"
    args = train_args(tiny_model, data, out, "--epochs", "4")
    args[args.index("--lr-schedule") + 1] = "linear"
    assert main(args) == 0
    assert json.loads((out / "summary.json").read_text())["eval"]["accuracy"] >= 0.9


def test_console_script_preloads_allocator_and_reports_it(tiny_model, data_file, tmp_path):
    out = tmp_path / "cli"
    proc = subprocess.run(
        [sys.executable, "-m", "cpuft",
         *train_args(tiny_model, data_file, out, "--max-steps", "2")],
        capture_output=True, text=True, env=cpuft_env(), timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    speedups = json.loads((out / "summary.json").read_text())["speedups"]
    from cpuft.speedplan.allocator import choose_allocator

    assert speedups["allocator"] == choose_allocator("auto")[0]


def test_ctrl_c_checkpoints_a_whole_step_and_resume_continues(tiny_model, data_file, tmp_path):
    import signal
    import time

    out = tmp_path / "int"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cpuft", *train_args(tiny_model, data_file, out,
                                                     "--max-steps", "100000")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cpuft_env(),
    )
    deadline = time.monotonic() + 120
    while not ((out / "metrics.jsonl").exists() and len(losses(out)) >= 3):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "rerun with --resume" in stderr and "Traceback" not in stderr
    [checkpoint] = out.glob("checkpoint-*")
    step = int(checkpoint.name.split("-")[1])
    assert step >= 3
    assert main(train_args(tiny_model, data_file, out, "--max-steps", str(step + 2),
                           "--resume")) == 0
    assert len(losses(out)) == step + 2


def test_resume_auto_starts_afresh_continues_and_replaces_a_start_without_checkpoint(
        tiny_model, data_file, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(train_args(tiny_model, data_file, out, "--max-steps", "4", "--resume",
                           "auto", "--save-total-limit", "1")) == 0
    assert len(losses(out)) == 4
    assert main(train_args(tiny_model, data_file, out, "--max-steps", "6", "--resume",
                           "auto")) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["resumed_from"] == "checkpoint-4" and len(losses(out)) == 6
    # Finished without --save-total-limit, the run keeps no checkpoint: it is not trained again.
    assert not list(out.glob("checkpoint-*"))
    capsys.readouterr()
    assert main(train_args(tiny_model, data_file, out, "--max-steps", "8", "--resume",
                           "auto")) == 2
    assert "has finished (summary.json)" in capsys.readouterr().err
    assert len(losses(out)) == 6
    (out / "summary.json").unlink()  # now a run stopped before its first checkpoint
    assert main(train_args(tiny_model, data_file, out, "--max-steps", "2", "--resume")) == 2
    assert "--resume: no checkpoint in" in capsys.readouterr().err
    assert main(train_args(tiny_model, data_file, out, "--max-steps", "2", "--resume",
                           "auto")) == 0
    assert len(losses(out)) == 2
    assert json.loads((out / "summary.json").read_text())["resumed_from"] is None


def test_sequences_past_the_models_positions_are_cut_to_fit(tiny_model, tmp_path, capsys):
    # The tiny model has 64 positions; these texts are ~100 tokens.
    rows = [(" ".join([text] * 12), label) for text, label in sentiment_rows(20, seed=3)]
    long_file = write_csv(tmp_path / "long.csv", rows)
    out = tmp_path / "run"
    assert main(train_args(tiny_model, long_file, out, "--max-steps", "2",
                           "--max-seq-length", "4096")) == 0
    assert "--max-seq-length 4096 is longer than this model takes: using 64" in \
        capsys.readouterr().out
    assert json.loads((out / "cpuft_run.json").read_text())["config"]["max_seq_length"] == 64


def test_resume_refuses_settings_that_would_make_another_run(tiny_model, data_file, tmp_path,
                                                             capsys):
    out = tmp_path / "run"
    assert main(train_args(tiny_model, data_file, out, "--max-steps", "2",
                           "--save-total-limit", "1")) == 0
    capsys.readouterr()
    assert main(train_args(tiny_model, data_file, out, "--max-steps", "4", "--resume",
                           "--batch-size", "4", "--seed", "7")) == 2
    err = capsys.readouterr().err
    assert "--batch-size was 8, now 4; --seed was 42, now 7" in err
    assert losses(out) and len(losses(out)) == 2  # the run on disk is untouched
    assert main(train_args(tiny_model, data_file, out, "--max-steps", "4", "--resume",
                           "--log-steps", "2")) == 0  # steps and logging may change


@pytest.mark.slow
def test_compile_on_trains_with_every_speed_up(tiny_model, data_file, tmp_path):
    # bf16 weights, cpuft's dropout (its numpy-made masks are a graph break) and attention.
    out = tmp_path / "compiled"
    assert main(train_args(tiny_model, data_file, out, "--max-steps", "3", "--compile", "on",
                           "--precision", "bf16")) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["compile"] == "on" and summary["steps"] == 3
    assert summary["speedups"]["bf16_weights"] is True and summary["speedups"]["fast_dropout"]
    assert len(losses(out)) == 3 and all(math.isfinite(x) for x in losses(out))


def test_a_classifier_trains_and_evaluates_on_seeded_subsets(tiny_model, data_file, tmp_path,
                                                              capsys):
    """44 rows: 39 to train and 5 held out by --validation-split 0.1 (stratified); the subsets
    are the same rows on every run."""
    runs = []
    for name in ("a", "b"):
        out = tmp_path / name
        assert main(train_args(tiny_model, data_file, out, "--max-steps", "1",
                               "--max-train-samples", "12", "--max-eval-samples", "3")) == 0
        runs.append(json.loads((out / "summary.json").read_text()))
    said = capsys.readouterr().out
    assert "train: a seeded subset of 12 of its 39 samples" in said
    assert "validation: a seeded subset of 3 of its 5 samples" in said
    assert [r["train_samples"] for r in runs] == [12, 12]
    assert runs[0]["eval"] == runs[1]["eval"]
    assert runs[0]["eval"]["accuracy"] in (0.0, 1 / 3, 2 / 3, 1.0)  # three samples scored
    # the attention kernel was timed at the length of the run's batches, with the model's heads
    assert re.match(r"auto: measured at \d+ tokens, 2 heads of 16, dropout 0.1: matmul ",
                    runs[0]["speedups"]["attention_reason"]), runs[0]["speedups"]


def test_a_model_of_1d_convolutions_is_measured_on_the_runs_first_batch(tmp_path, data_file):
    # SqueezeBERT's projections are 1x1 Conv1d: the recipe hands its first batch to the
    # channels-last measurement, which no made-up shape may stand in for
    from transformers import AutoConfig, AutoModelForSequenceClassification

    from tests.helpers import make_tiny_model

    folder = make_tiny_model(tmp_path / "squeezebert")
    vocab = AutoConfig.from_pretrained(folder).vocab_size
    config = AutoConfig.for_model("squeezebert", vocab_size=vocab, hidden_size=32,
                                  embedding_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=64)
    AutoModelForSequenceClassification.from_config(config).save_pretrained(folder)
    out = tmp_path / "out"
    assert main(train_args(folder, data_file, out, "--max-steps", "2")) == 0
    reason = json.loads((out / "summary.json").read_text())["speedups"]["channels_last_reason"]
    assert reason.startswith("measured on the first batch: 12 1-d convolution(s) run as "
                             "height-1 2-d ones"), reason
